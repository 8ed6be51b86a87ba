"""Execution environments for `lambda:` functions: each registered function in processes of its own.

settings (per-function configuration) and options (its command-line option), target (finding and
checking a `lambda:` target at start), function (the handler object the router serves), host (the
loopback answer listener and the pools), pool (a function's processes, its concurrency), process
(one process and its channel), answers (the listener), tls (its private CA), environ (a function's
environment variables), output (a function's lines in the daemon's log); runtime and
runtime_crhelper run inside the function's own interpreter, stock holds the `cfnresponse` inline
code gets; exits (a process's end and its group killed), sandbox and confine (what a function
may reach: Landlock, non-dumpable; the daemon's part is cfn_provider.function_isolation). `fc:`
functions (Alibaba Function Compute's, on the ROS transports) are served the same way: fc_target,
fc_function, fc_context, and fc_runtime inside the function's interpreter.
"""
