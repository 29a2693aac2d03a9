"""One sanitiser for text that comes from outside: model replies, server error bodies, data-file strings.

Such text may contain anything. Three guarantees, one function each:

- :func:`clean` — valid Unicode that encodes as UTF-8: lone surrogates (``\\ud800``; a JSON ``\\ud800`` escape
  or a broken server produces them) become U+FFFD. Applied where outside text enters the run (every
  :class:`~pytest_robustexplain.explainers.base.Explanation`), so caches, reports and xdist payloads can
  always write it.
- :func:`visible` — for one line of a terminal, a CI log, a pytest failure message or a GitHub annotation:
  line breaks, C0/C1 control characters (ESC starts terminal escape sequences) and bidirectional
  overrides (U+202E reverses what a reviewer reads) are shown as visible placeholders, so outside text can
  neither start a line (on GitHub Actions a line starting with ``::`` is a workflow command) nor move the
  cursor, retitle the window or reorder the text; ``::`` and ``##[`` are replaced (a report may wrap a
  long line anywhere, and the runner trims leading blanks before it looks for a command).
- :func:`markdown_inert` — for Markdown (the job step summary, PR comments): HTML escaped and every
  character that makes Markdown markup (links, images, emphasis, code, tables, headings) backslash-escaped;
  bare URLs are broken with a zero-width space so GitHub does not autolink them.
"""

from __future__ import annotations

import html
import re
import unicodedata
from urllib.parse import quote, unquote, urlsplit, urlunsplit

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls (but tab), DEL, C1 controls; line and paragraph separators; bidi embeddings, overrides and
# isolates, and the implicit marks (they reorder or hide text without being seen).
_INVISIBLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u061c"
                        "\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "⏎", "\r": "␍", "\x1b": "␛", "\x7f": "␡"}
# What makes inline markup: emphasis, code, tables, strike-through (HTML is escaped); links and images
# need "](" or "![", broken below, so the brackets of an interval stay as they are.
_MARKDOWN = re.compile(r"([\\`*_|~])")
_LINK = re.compile(r"\]\(|!\[")
_AUTOLINK = re.compile(r"(?i)(https?|ftp|mailto|www)(:|\.)")
_ZWSP = "\u200b"


def clean(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD: always encodable as UTF-8."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def _show(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block: ␀ … ␟
    return f"\\u{code:04x}"


# GitHub's runner takes a log line as a workflow command when, leading blanks trimmed, it starts with "::"
# (or the legacy "##["); reports wrap long lines, so outside text may carry neither anywhere.
_COMMANDS = {"::": "\u2236\u2236", "##[": "#\u2236#["}  # ∶ (U+2236 RATIO) reads as a colon, is none


def visible(text: str, *, commands: bool = False) -> str:
    """One line, with every control, line-break and bidi character shown instead of obeyed, and no
    workflow-command marker (``commands=True`` keeps ``::``: for the body of the plugin's own annotation,
    where the runner reads no further command)."""
    shown = _INVISIBLE.sub(_show, clean(text))
    if not commands:
        for marker, inert in _COMMANDS.items():
            shown = shown.replace(marker, inert)
    return shown


def spelled_out(text: str, *, commands: bool = False) -> str:
    """:func:`visible`, with every format character (zero-width, BOM, word joiner; the bidi marks already
    shown) spelled ``\\uXXXX``: for a message about an input, where the invisible character is the point."""
    shown = visible(text, commands=commands)
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) == "Cf" else c for c in shown)


def markdown_inert(text: str) -> str:
    """Text that renders literally in GitHub Markdown: no markup, link, image, HTML or autolink."""
    # Markdown is a file or a comment, never a log line: "::" may stay (test ids are full of it).
    unlinked = _AUTOLINK.sub(lambda m: f"{m.group(1)}{_ZWSP}{m.group(2)}", visible(text, commands=True))
    escaped = _MARKDOWN.sub(r"\\\1", html.escape(unlinked, quote=False))
    return _LINK.sub(lambda m: "]\\(" if m.group() == "](" else "\\![", escaped)


_REFERENCE = re.compile(r"([@#])(?=[\w-])")


def comment_inert(text: str) -> str:
    """:func:`markdown_inert`, and no ``@mention`` or ``#123`` reference: on a pull-request comment GitHub
    notifies the user a test id or a model reply names, and links an issue (a zero-width space breaks it)."""
    return _REFERENCE.sub(lambda m: m.group(1) + _ZWSP, markdown_inert(text))


# Credentials in a URL (``http://user:password@host``): sent to the server, never written anywhere else.
REDACTED = "***"


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its ``user:password@`` part, and the (user, password) it carried (None without).

    The backends keep the credentials for the requests' Authorization header and use the rest as the host
    everywhere else, so no report, cache file or error message can carry them."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, None
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, netloc = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=netloc)), (unquote(user), unquote(password))


# A path segment that is a key, not a place: a provider's key prefix (OpenAI's and most gateways' sk-,
# Hugging Face's hf_, Groq's gsk_, Google's AIza, Replicate's r8_, GitHub's ghp_ …) before 16 or more
# characters, or a run of 24 letters and digits holding both (a random token; a UUID's longest run is 12,
# a model name's words are short, so neither is taken for one).
_KEY_SEGMENT = re.compile(r"(?i)(?:sk|pk|rk|hf|gsk|xai|ghp|gho|r8|key|token)[-_][A-Za-z0-9_-]{16,}"
                          r"|AIza[0-9A-Za-z_-]{16,}")
_TOKEN_RUN = re.compile(r"[A-Za-z0-9]{24,}")


def _is_key(segment: str) -> bool:
    if _KEY_SEGMENT.fullmatch(segment):
        return True
    return any(re.search(r"\d", run) and re.search(r"[A-Za-z]", run) for run in _TOKEN_RUN.findall(segment))


def redact_path(url: str) -> str:
    """``url`` with each path segment that looks like a key (:data:`_KEY_SEGMENT`, a long random token)
    shown as ``***``: some gateways take the key in the path (``https://gw.example/sk-…/v1``), which the
    requests need and no report, message or record may show."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    if not slash:
        return url
    shown = "/".join(REDACTED if _is_key(part) else part for part in path.split("/"))
    return f"{scheme}{sep}{authority}/{shown}"


def redact_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part replaced by ``***`` (the user kept, so the
    reader knows credentials were given), or a bare ``user@`` (a token) replaced by ``***``; each value of
    its query string and its fragment too (``?api_key=***#***``: gateways take keys there, and a setting
    that carries one is refused by a message that must not repeat it); and a path segment that looks like
    a key (:func:`redact_path`)."""
    bare, credentials = split_credentials(url)
    bare = redact_path(_redact_query(bare))
    if credentials is None:
        return bare

    parts = urlsplit(bare)
    # A user alone may be the secret (``https://TOKEN@host``): then it is what is hidden.
    userinfo = f"{quote(credentials[0], safe='')}:{REDACTED}" if credentials[1] else REDACTED
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{parts.netloc}"))


def _redact_query(url: str) -> str:
    """``url`` with each query value and the fragment replaced by ``***`` (the names kept)."""
    rest, hashed, _ = url.partition("#")
    head, mark, query = rest.partition("?")
    shown = "&".join(f"{item.partition('=')[0]}={REDACTED}" for item in query.split("&") if item)
    return head + (f"?{shown}" if mark else "") + (f"#{REDACTED}" if hashed else "")
