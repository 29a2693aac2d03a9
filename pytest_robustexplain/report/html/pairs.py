"""The table of all pairs: their JSON block (:func:`pairs_data`, written by :func:`_script_json` so no
string can leave the ``<script>`` element), the inline script that sorts, filters, searches and pages it,
the page's Content-Security-Policy that lets only that script run, and the section's markup.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from typing import Any

from ...results import RunResult, is_control, metrics_of
from ..summary import describe_changes
from .common import EXPLANATION_LIMIT, e

# Each row of the JSON block is a list in this order (then ρ and each metric): compact arrays, not objects,
# so 25,000 pairs do not repeat 15 key names each. Originals are shared by a user's pairs and stored once.
_PAIR_FIELDS = ("model", "kind", "severity", "user", "item", "failure", "changes", "original", "perturbed")
_PAGE_SIZES = (25, 50, 100, 250)
_PAGE_SIZE = 50
_SCRIPT_UNSAFE = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                  ("\u2029", "\\u2029"))

PAIRS_JS = r"""(() => {
"use strict";
// The table of all pairs, drawn from the JSON block one page of rows at a time. Outside text reaches the
// page only through textContent and createElement: never parsed as markup.
const app = document.getElementById("pairs-app");
const data = JSON.parse(document.getElementById("pairs-data").textContent);
const F = {};
data.fields.forEach((name, i) => { F[name] = i; });
const rows = data.rows;
const names = {model: data.models, kind: data.kinds};
const heads = Array.from(app.querySelectorAll("thead th"));
const tbody = app.querySelector("tbody");
const filters = Array.from(app.querySelectorAll("select[data-field]"));
const search = app.querySelector("input[type=search]");
const size = app.querySelector("select.page-size");
const status = app.querySelector(".pairs-status");
const nav = Array.from(app.querySelectorAll("button[data-page]"));
const collator = new Intl.Collator("en", {numeric: true});
const count = (n) => n.toLocaleString("en");
let shown = [];  // indexes of the rows that pass the filters, in sort order
let page = 0;
let sortField = null;
let sortDir = 1;
let lower = null;  // lower-cased searchable text, made by the first search

const sorted = heads.find((th) => th.hasAttribute("aria-sort"));
if (sorted) {
  sortField = sorted.dataset.field;
  sortDir = sorted.getAttribute("aria-sort") === "descending" ? -1 : 1;
}

function shownText(row, field, type) {
  const v = row[F[field]];
  if (type === "num") return v === null ? "\u2014" : v.toFixed(3);
  if (type === "sev") return "L" + v;
  if (field in names) return names[field][v];
  return v === "" ? "\u2014" : String(v);
}

function filter() {
  const wanted = filters.filter((s) => s.value !== "").map((s) => [F[s.dataset.field], Number(s.value)]);
  const query = search.value.trim().toLowerCase();
  let originalHit = null;
  if (query) {
    if (lower === null) {
      lower = {
        rows: rows.map((r) => [r[F.user], r[F.item], r[F.failure], r[F.changes], r[F.perturbed]]
          .join("\n").toLowerCase()),
        originals: data.originals.map((t) => t.toLowerCase()),
      };
    }
    originalHit = lower.originals.map((t) => t.includes(query));
  }
  shown = [];
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i];
    if (wanted.every(([c, v]) => r[c] === v)
        && (!query || originalHit[r[F.original]] || lower.rows[i].includes(query))) shown.push(i);
  }
  sort();
  page = 0;
  render();
}

function sort() {
  if (sortField === null) return;
  const col = F[sortField];
  const named = names[sortField];
  const dir = sortDir;
  shown.sort((a, b) => {
    let x = rows[a][col];
    let y = rows[b][col];
    if (named) { x = named[x]; y = named[y]; }
    if (x === y) return a - b;
    if (x === null) return 1;  // no value (a metric the pair lacks): last either way
    if (y === null) return -1;
    const order = typeof x === "number" ? x - y : collator.compare(x, y);
    return order === 0 ? a - b : order * dir;  // ties keep the run's order
  });
}

function toggle(button, row) {
  // The pair's texts in a row of their own under it, as wide as the screen allows.
  const tr = button.closest("tr");
  if (button.getAttribute("aria-expanded") === "true") {
    tr.nextElementSibling.remove();
    button.setAttribute("aria-expanded", "false");
    button.textContent = "show";
    return;
  }
  const box = document.createElement("div");
  box.className = "pair-texts";
  const parts = [["perturbation", row[F.changes]], ["original", data.originals[row[F.original]]],
                 ["perturbed", row[F.perturbed]]];
  for (const [label, text] of parts) {
    const part = document.createElement("div");
    part.className = "pair-" + label;
    const head = document.createElement("div");
    head.className = "pair-label";
    head.textContent = label;
    const body = document.createElement("div");
    body.className = "explanation";
    body.textContent = text === "" ? "(empty)" : text;
    part.append(head, body);
    box.appendChild(part);
  }
  const cell = document.createElement("td");
  cell.colSpan = heads.length;
  cell.appendChild(box);
  const detail = document.createElement("tr");
  detail.className = "pair-detail";
  detail.appendChild(cell);
  tr.after(detail);
  button.setAttribute("aria-expanded", "true");
  button.textContent = "hide";
}

function render() {
  const per = Number(size.value);
  const pages = Math.max(1, Math.ceil(shown.length / per));
  page = Math.min(Math.max(page, 0), pages - 1);
  const start = page * per;
  const end = Math.min(shown.length, start + per);
  const fragment = document.createDocumentFragment();
  for (let k = start; k < end; k++) {
    const row = rows[shown[k]];
    const tr = document.createElement("tr");
    if (row[F.failure] !== "") tr.className = "pair-failed";
    for (const th of heads) {
      const td = document.createElement("td");
      const type = th.dataset.type;
      if (type === "texts") {
        const button = document.createElement("button");
        button.type = "button";
        button.setAttribute("aria-expanded", "false");
        button.textContent = "show";
        button.addEventListener("click", () => toggle(button, row));
        td.appendChild(button);
      } else {
        td.textContent = shownText(row, th.dataset.field, type);
        if (type === "num" || type === "sev") td.className = "num";
      }
      tr.appendChild(td);
    }
    fragment.appendChild(tr);
  }
  tbody.replaceChildren(fragment);
  const all = shown.length === rows.length ? "" : " (" + count(rows.length) + " in the run)";
  status.textContent = shown.length
    ? "pairs " + count(start + 1) + "\u2013" + count(end) + " of " + count(shown.length) + all
    : "no pair matches" + all;
  for (const button of nav) {
    const back = button.dataset.page === "first" || button.dataset.page === "prev";
    button.disabled = back ? page === 0 : page >= pages - 1;
  }
}

for (const th of heads) {
  const button = th.querySelector("button");
  if (!button) continue;
  button.addEventListener("click", () => {
    if (sortField === th.dataset.field) {
      sortDir = -sortDir;
    } else {
      sortField = th.dataset.field;
      sortDir = 1;
    }
    for (const h of heads) h.removeAttribute("aria-sort");
    th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
    sort();
    page = 0;
    render();
  });
}
for (const select of filters) select.addEventListener("change", filter);
search.addEventListener("input", filter);
size.addEventListener("change", () => { page = 0; render(); });
for (const button of nav) {
  button.addEventListener("click", () => {
    const to = button.dataset.page;
    page = to === "first" ? 0 : to === "prev" ? page - 1 : to === "next" ? page + 1 : Infinity;
    render();
  });
}
filter();
app.hidden = false;
})();"""

# Only the script above may run (by its hash), nothing may be fetched or submitted: the page works offline,
# and markup injected by some unescaped string could neither run a script nor call out.
CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{base64.b64encode(hashlib.sha256(PAIRS_JS.encode()).digest()).decode()}'; "
        "base-uri 'none'; form-action 'none'")


def _script_json(value: Any) -> str:
    """JSON that can sit inside a ``<script>`` element: ``<``, ``>`` and ``&`` escaped, so no string can
    close the element (``</script>``) or change how the HTML parser reads it (``<!--``), and the line and
    paragraph separators too (older JavaScript parsers ended a string at them). They only occur inside
    JSON strings, where a ``\\uXXXX`` escape reads back as the same character."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char, escape in _SCRIPT_UNSAFE:
        text = text.replace(char, escape)
    return text


def _score(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 3)


def pairs_data(run: RunResult) -> dict[str, Any]:
    """Every pair of the run, as the pairs table reads it (see ``_PAIR_FIELDS``)."""
    pairs = run.pairs
    models = {name: i for i, name in enumerate(dict.fromkeys(p.key.model for p in pairs))}
    kinds = {name: i for i, name in enumerate(dict.fromkeys(p.key.kind for p in pairs))}
    metrics = metrics_of(pairs)
    originals: dict[str, int] = {}
    rows = []
    for p in pairs:
        original = originals.setdefault(p.original[:EXPLANATION_LIMIT], len(originals))
        rows.append([models[p.key.model], kinds[p.key.kind], p.key.severity, p.key.user_id, p.key.item_id,
                     p.failure or "", describe_changes(p.changes), original, p.perturbed[:EXPLANATION_LIMIT],
                     _score(p.combined), *(_score(p.metric(m) if p.carries(m) else None) for m in metrics)])
    return {"fields": [*_PAIR_FIELDS, "combined", *metrics], "models": list(models), "kinds": list(kinds),
            "originals": list(originals), "rows": rows}


def pairs_section(run: RunResult) -> str:
    """Every pair in one table to sort, filter and search, drawn by the page's script one page at a time
    (so 25,000 pairs open quickly); the static tables above stay the page without JavaScript."""
    if not run.pairs:
        return ""
    data = pairs_data(run)
    severities = sorted({p.key.severity for p in run.pairs})

    def choice(field: str, label: str, options: list[tuple[Any, str]]) -> str:
        items = "".join(f'<option value="{e(value)}">{e(text)}</option>' for value, text in options)
        return (f'<label>{label} <select data-field="{field}"><option value="">all</option>{items}</select>'
                "</label>")

    controls = [choice("kind", "kind", list(enumerate(data["kinds"]))),
                choice("severity", "severity", [(s, f"L{s}") for s in severities])]
    columns = [("user", "text", "user"), ("item", "text", "item"), ("kind", "kind", "kind"),
               ("severity", "sev", "severity"), ("combined", "num", "ρ"),
               *((m, "num", m) for m in data["fields"][len(_PAIR_FIELDS) + 1:]),
               ("failure", "text", "failure")]
    if len(data["models"]) > 1:
        controls.insert(0, choice("model", "model", list(enumerate(data["models"]))))
        columns.insert(0, ("model", "model", "model"))
    head = "".join(f'<th data-field="{field}" data-type="{kind}"'
                   + (' aria-sort="ascending"' if field == "combined" else "")  # least robust first
                   + f'><button type="button">{e(label)}</button></th>' for field, kind, label in columns)
    # The texts' toggle first: on a phone it is in view without scrolling the table sideways.
    head = '<th data-field="original" data-type="texts">texts</th>' + head
    sizes = "".join(f'<option{" selected" if n == _PAGE_SIZE else ""}>{n}</option>' for n in _PAGE_SIZES)
    pages = "".join(f'<button type="button" data-page="{to}">{text}</button>'
                    for to, text in (("first", "« first"), ("prev", "‹ previous"), ("next", "next ›"),
                                     ("last", "last »")))
    controls_n = sum(is_control(p.key.kind) for p in run.pairs)
    heading = f"All {len(run.pairs):,} pairs"
    if controls_n:  # the model sections count perturbed pairs; the table holds the controls too
        heading += (f" ({len(run.pairs) - controls_n:,} perturbed, {controls_n:,} controls: "
                    "<code>swap</code> another user's history, <code>control</code> the same history "
                    "resampled, both at L0)")
    return (f'<section id="all-pairs"><h2>{heading}</h2>'
            '<noscript><p class="note">This table needs JavaScript; the least robust pairs are listed under '
            "each model above, and the JSON report holds every pair.</p></noscript>"
            '<div id="pairs-app" hidden><div class="pairs-controls">' + "".join(controls)
            + '<label>text <input type="search" placeholder="user, item, explanation…" '
            'aria-label="search the pairs"></label></div>'
            f'<div class="table-wrap"><table class="pairs"><thead><tr>{head}</tr></thead><tbody></tbody>'
            f'</table></div><div class="pairs-pages">{pages}<span class="pairs-status" aria-live="polite">'
            f"</span><label>rows per page <select class=\"page-size\">{sizes}</select></label></div></div>"
            f'<script type="application/json" id="pairs-data">{_script_json(data)}</script>'
            f"<script>{PAIRS_JS}</script></section>")
