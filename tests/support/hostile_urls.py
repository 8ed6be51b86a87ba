"""Generated ResponseURLs for the URL rules' property tests: known-good ones (each dialect's, and
one under an operator's prefix) with hostile characters dropped in anywhere, half of them into
the authority, where a parser differential starts."""

from __future__ import annotations

from hypothesis import strategies as st

QUERY = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261127T000000Z&X-Amz-Expires=7200&X-Amz-Signature=ab"
GOOD = (
    "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/arn%3Aaws%3Acloudformation"
    "%3Aus-east-1%3A123456789012%3Astack/s/1%7CThing%7C1" + QUERY,
    "https://s3.eu-west-1.amazonaws.com/cloudformation-custom-resource-response-euwest1/arn%3As/1" + QUERY,
    "https://cloudformation-custom-resource-response-cnnorth1.s3.cn-north-1.amazonaws.com.cn/k" + QUERY,
    "http://127.0.0.1:5000/bucket/key" + QUERY,  # under the operator's prefix below
    "https://ros.cn-hangzhou.aliyuncs.com/response?x=1",
)
PREFIX = "http://127.0.0.1:5000/bucket/"
# what splits, joins, escapes or disguises the parts of a URL, in ASCII and beyond
HOSTILE = st.sampled_from(
    list("@:/\\?#%.;[]!$&'()*+,=~^`{}|<>\"")
    + ["%2e", "%2f", "%40", "%5c", "%3a", "..", "\u0660", "\uff0e"]
    + ["\u00e9", "\u0130", "\u212a", "\u2100", "\ufe6b", "\uff20", "\uff1a", "\uff0f", "\u3002", "xn--", "0x7f"]
    + ["1", "A", "a", "443", "65536", "-1", " ", "\t", "\x00"]
)


def mutated_urls(most: int = 3) -> st.SearchStrategy[str]:
    """A GOOD URL with 1 to `most` HOSTILE pieces inserted."""

    @st.composite
    def build(draw: st.DrawFn) -> str:
        url = draw(st.sampled_from(GOOD))
        for _ in range(draw(st.integers(1, most))):
            authority_end = url.find("/", len("https://")) % (len(url) + 1)  # half the draws go there
            at = draw(st.one_of(st.integers(0, len(url)), st.integers(0, authority_end)))
            url = url[:at] + draw(HOSTILE) + url[at:]
        return url

    return build()
