"""Dialects: what differs between CloudFormation and Alibaba Cloud ROS requests and answers."""
