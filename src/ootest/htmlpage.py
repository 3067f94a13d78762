"""What ootest's HTML pages share: one self-contained file each, readable offline.

Note [Self-contained pages]
A report page is opened from a CI artifact, a mail, a local folder: it loads
nothing (no external script, style, font or image; a Content-Security-Policy
that allows only what is inline says so to the browser) and every piece of
test-derived text (names, messages, reasons) is HTML-escaped. Tables marked
``sortable`` sort by a click on their header (numbers by ``data-v``), and a
``filter`` box above a table hides the rows that do not contain its text; both
are a few lines of inline script, and without scripts the page reads the same.
Its size grows with what it summarises (ops, files, reasons), never with the
number of variants (Note [Bounded HTML]).

Note [Escaping test-derived text]
Test names, messages and reasons come from the code under test (a PR's tests,
a backend's error text): in a job summary they must stay text. :func:`md` makes
any of them inert in GitHub-flavoured Markdown: control and bidirectional
formatting characters go (newlines become spaces), ``& < > " '`` become HTML
entities (no tag, no comment, no entity of theirs survives), every other ASCII
punctuation character Markdown or a table gives meaning to is backslash-escaped
(so no link, image, emphasis, heading, table cell, autolink or ``::`` workflow
command can start from it: ``::`` is written ``\\:\\:``), ``@`` becomes ``&#64;``
(no mention), and the text is cut to a bound. The summary's size is bounded by
its row counts, not by the run.
"""

from __future__ import annotations

import html
import re
import unicodedata

from ootest.untrusted import hide_env_secrets

__all__ = [
    "BIDI",
    "CSP",
    "SORT_FILTER_JS",
    "WIDGET_CSS",
    "clipped",
    "esc",
    "filter_box",
    "heat_style",
    "md",
    "page",
    "visible",
]

#: Nothing from the network; inline style and script only (Note [Self-contained pages]).
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

#: What the sortable tables, filter boxes and short lists need (every page has it).
WIDGET_CSS = """
th.l{text-align:left}
table.sortable th{cursor:pointer;user-select:none;background:#f3f3f3}
table.sortable th:after{content:" \\2195";color:#999;font-size:.8em}
input.filter{margin:.3em 0;padding:3px 6px;width:24em}
ul.tight{margin:0;padding-left:1.2em;text-align:left}
td.h{white-space:nowrap;font-variant-numeric:tabular-nums}
td.causes{min-width:16em;max-width:28em;font-size:.85em}
div.wide{overflow-x:auto;max-width:100%}
nav.toc a{margin-right:1em}
.muted{color:#777}
"""

BASE_CSS = (
    WIDGET_CSS
    + """
body{font:14px system-ui,sans-serif;margin:2em;color:#222;max-width:110em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}h3{font-size:1em}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;vertical-align:top}
td:first-child,th:first-child,td.l,th.l{text-align:left}
th{background:#f3f3f3}
code{background:#f3f3f3;padding:0 .2em}
.bad{color:#b00020;font-weight:bold}.good{color:#1b7f2a}.warn{color:#a06000}
summary{cursor:pointer}details ul{margin:.2em 0;text-align:left}
.num{font-variant-numeric:tabular-nums}
"""
)

SORT_FILTER_JS = """
(function(){
function key(td){var v=td.getAttribute('data-v');if(v!==null&&v!==''&&!isNaN(+v))return +v;
var t=td.textContent.trim();return t!==''&&!isNaN(+t)?+t:t.toLowerCase();}
document.querySelectorAll('table.sortable').forEach(function(tb){
var head=tb.querySelector('tr');if(!head)return;
Array.prototype.forEach.call(head.children,function(th,i){th.addEventListener('click',function(){
var rows=Array.prototype.slice.call(tb.querySelectorAll('tr')).slice(1).filter(function(r){
return !r.classList.contains('fixed');});
var dir=th.getAttribute('data-dir')==='desc'?1:-1;th.setAttribute('data-dir',dir<0?'desc':'asc');
rows.sort(function(a,b){var x=key(a.children[i]),y=key(b.children[i]);
if(typeof x!==typeof y){x=String(x);y=String(y);}return x<y?-dir:x>y?dir:0;});
var parent=rows.length?rows[0].parentNode:null;rows.forEach(function(r){parent.appendChild(r);});
});});});
document.querySelectorAll('input.filter').forEach(function(inp){
var tb=document.getElementById(inp.getAttribute('data-table'));if(!tb)return;
inp.addEventListener('input',function(){var q=inp.value.toLowerCase();
Array.prototype.slice.call(tb.querySelectorAll('tr')).slice(1).forEach(function(r){
r.style.display=r.textContent.toLowerCase().indexOf(q)>=0?'':'none';});});});
})();
"""


#: Bidirectional formatting characters (a "Trojan Source" name reads otherwise).
BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f" + "".join(sorted(BIDI)) + "]")


def visible(text: object) -> str:
    """``text`` without control and bidirectional formatting characters (newlines and
    tabs kept): what a page or a summary may show of test-derived text."""
    return _INVISIBLE.sub("", hide_env_secrets(str(text)))


def esc(text: object) -> str:
    """Any text from a test run or a config, safe in HTML text and quoted attributes."""
    return html.escape(visible(text), quote=True)


def clipped(text: object, n: int = 160) -> str:
    """``text`` escaped, cut to ``n`` characters; the whole of it on hover."""
    t = visible(text)
    if len(t) <= n:
        return esc(t)
    return f"<span title='{esc(t)}'>{esc(t[: n - 1])}…</span>"


def heat_style(passed: int, ran: int) -> str:
    """A cell's background from red (none passed) to green (all passed); '' when none ran."""
    if ran <= 0:
        return ""
    hue = int(120 * passed / ran)
    return f"background:hsl({hue},70%,82%)"


def filter_box(table_id: str, what: str) -> str:
    return (
        f"<input class='filter' type='search' data-table='{esc(table_id)}' "
        f"placeholder='filter {esc(what)}' aria-label='filter {esc(what)}'>"
    )


def page(title: str, body: str, css: str = "", script: bool = True) -> str:
    """A whole page around ``body`` (already escaped HTML)."""
    js = f"<script>{SORT_FILTER_JS}</script>" if script else ""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{BASE_CSS}{css}</style></head>"
        f"<body>{body}{js}</body></html>\n"
    )


_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;", "@": "&#64;"}
_PUNCT = "\\`*_{}[]()#+-.!|~:=$%^,;/?"
_TABLE: dict[int, str] = {ord(c): "\\" + c for c in _PUNCT}
_TABLE.update({ord(c): e for c, e in _ENTITIES.items()})
CHARS = 200  # characters of one text


def md(text: object, limit: int = CHARS) -> str:
    """``text`` as inert Markdown (Note [Escaping test-derived text]), with no
    secret of this process's environment (Note [Secrets in the environment])."""
    s = hide_env_secrets(str(text))
    out = []
    for ch in s:
        if ch in "\r\n\t":
            out.append(" ")
        elif ch in BIDI or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            continue
        else:
            out.append(ch)
    s = re.sub(r" {2,}", " ", "".join(out)).strip()
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.translate(_TABLE)
