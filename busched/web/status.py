"""The status page at ``/``: server-rendered HTML from the dict `busched.scheduler.overview.build` makes.

Plain HTML and a little inline CSS, no JavaScript: the page works in any browser, in ``curl``, and
in a headless one for the tests; it reloads itself every few seconds (``<meta http-equiv="refresh">``,
``?refresh=SECONDS``, 0 for never).  Every value is escaped (`html.escape`): queue, job and node
names and a refused configuration's error text are user input.  The same dict is served as JSON at
``/status.json`` (`busched.web.server`).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from busched.api.quantity import binary_units

__all__ = ["render", "render_absent", "DEFAULT_REFRESH", "MAX_REFRESH"]

DEFAULT_REFRESH = 5
MAX_REFRESH = 3600

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;background:#fff;min-width:40%}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.meta span{margin-right:1.2em}.ok{color:#17692d}.bad{color:#b00020;font-weight:600}.dim{color:#888}
.banner{border:1px solid #b00020;background:#fdecee;padding:.5em .8em;margin:.6em 0}
.banner.warn{border-color:#a66b00;background:#fff6e0}.banner ul{margin:.3em 0 0;padding-left:1.2em}
code{font-family:ui-monospace,monospace;font-size:.95em}
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _table(heads: Iterable[str], rows: list[list[str]], empty: str) -> str:
    """``rows`` hold cells already rendered (escaped); a cell starting ``<td`` is used as it is."""
    if not rows:
        return f'<p class="dim">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _num(text: str) -> str:
    return f'<td class="n">{text}</td>'


def _resources(r: Mapping[str, Any] | None) -> str:
    if r is None:
        return '<span class="dim">-</span>'
    parts = [f"{_e(k)} {_e(binary_units(str(v)) if k == 'memory' else v)}" for k, v in r.items()]
    return ", ".join(parts) or '<span class="dim">none</span>'


def _counts(c: Mapping[str, int]) -> str:
    return ", ".join(f"{_e(k)} {_e(v)}" for k, v in sorted(c.items())) or '<span class="dim">none</span>'


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _time(epoch: float) -> str:
    if not epoch:
        return "-"
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%H:%M:%S UTC")


def _more(n: int, what: str) -> str:
    return f'<p class="dim">and {n} more {_e(what)}</p>' if n else ""


def _header(d: Mapping[str, Any]) -> str:
    cfg = d["config"]
    ready = '<span class="ok">ready</span>' if d["ready"] else '<span class="bad">not ready</span>'
    source = f"<code>{_e(cfg['file'])}</code>" if cfg["file"] else "the built-in configuration"
    out = (f'<h1>busched</h1><div class="meta" id="role"><span>role: <b>{_e(d["role"])}</b></span>'
           f"<span>{ready}</span><span>cycles: {_e(d['cycle'])}</span>"
           f"<span>configuration: {source} (actions {_e(', '.join(cfg['actions']))})</span></div>")
    if not cfg["loaded"]:
        out += (f'<div class="banner" id="config-error"><span class="bad">configuration file '
                f"{_e(cfg['file'])} refused</span>: {_e(cfg['error'])}<br>the previous configuration stays in "
                f"force until the file loads</div>")
    if cfg.get("warnings"):
        items = "".join(f"<li>{_e(w)}</li>" for w in cfg["warnings"])
        out += (f'<div class="banner warn" id="config-warnings"><span class="bad">configuration warnings</span>'
                f"<ul>{items}</ul></div>")
    return out


def _queues(rows: list[Mapping[str, Any]]) -> str:
    out = []
    for q in rows:
        share = q["share"]
        out.append([_e(q["name"]), _e(q["state"]), _num(_e(q["weight"])), _resources(q["deserved"]),
                    _resources(q["allocated"]), _num("-" if share is None else f"{share * 100:.1f}%"),
                    _counts(q["jobs"])])
    return ('<section id="queues"><h2>Queues</h2>'
            + _table(("queue", "state", "weight", "deserved", "allocated", "share", "jobs by phase"), out,
                     "no queues") + "</section>")


def _why(j: Mapping[str, Any]) -> str:
    """busched's explanation, then Volcano's condition (its reason code and aggregated reasons)."""
    parts = [_e(j["explanation"])] if j["explanation"] else []
    if j["reason"]:
        parts.append(f'<span class="dim">Volcano: {_e(j["reason"])}: {_e(j["message"])}</span>')
    return "<br>".join(parts) or '<span class="dim">not tried yet</span>'


def _pending(rows: list[Mapping[str, Any]], more: int) -> str:
    out = [[f"{_e(j['namespace'])}/{_e(j['name'])}", _e(j["queue"]), _e(j["phase"]),
            _num(f"{_e(j['pending'])}/{_e(j['tasks'])}"), _num(_e(j["minMember"])),
            f"<code>{_e(j['code'] or j['reason'] or '-')}</code>", _why(j)] for j in rows]
    return ('<section id="pending"><h2>Pending jobs</h2>'
            + _table(("job", "queue", "phase", "pending tasks", "min member", "reason", "why"), out,
                     "no pending jobs") + _more(more, "jobs (busched get jobs; busched explain NS/NAME)")
            + "</section>")


def _nodes(rows: list[Mapping[str, Any]], more: int) -> str:
    out = []
    for n in rows:
        alive = n["state"] == "alive"
        state = f'<span class="{"ok" if alive else "bad"}">{_e(n["state"])}</span>'
        if n["refused"]:
            state += f' <span class="bad">refused: {_e(n["refused"])}</span>'
        out.append([_e(n["name"]), state, _resources(n["allocatable"]), _resources(n["used"]), _num(_e(n["tasks"]))])
    return ('<section id="nodes"><h2>Nodes</h2>'
            + _table(("node", "agent", "allocatable", "used", "tasks"), out, "no nodes")
            + _more(more, "nodes (busched get nodes)") + "</section>")


def _cycles(rows: list[Mapping[str, Any]]) -> str:
    out = []
    for c in rows:
        if c["skipped"]:
            span = f"{c['cycle']}" if c["count"] == 1 else f"{c['cycle']}-{c['last']}"
            out.append([_e(span), _e(_time(c["time"])),
                        f'<td colspan="4" class="dim">skipped: nothing changed ({_e(c["count"])} cycles)</td>'])
            continue
        actions = ", ".join(f"{_e(a)} {_ms(s)}" for a, s in c["actions"].items())
        if c["error"]:
            actions = f'<span class="bad">failed: {_e(c["error"])}</span>'
        out.append([_e(c["cycle"]), _e(_time(c["time"])), _num(_ms(c["seconds"])), actions or "-",
                    _num(_e(c["binds"])), _num(_e(c["evicts"]))])
    return ('<section id="cycles"><h2>Last cycles</h2>'
            + _table(("cycle", "started", "took", "per action", "binds", "evicts"), out, "no cycle yet")
            + "</section>")


def _page(body: str, refresh: int) -> str:
    meta = f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh > 0 else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}<title>busched status</title>'
            f"<style>{_CSS}</style></head><body>{body}</body></html>")


def render(d: Mapping[str, Any], *, refresh: int = DEFAULT_REFRESH) -> str:
    """The page for ``d`` (`busched.scheduler.overview.build`), reloading every ``refresh`` seconds (0: never)."""
    body = (_header(d) + _queues(d["queues"]) + _pending(d["pending"], d.get("pending_more", 0))
            + _nodes(d["nodes"], d.get("nodes_more", 0)) + _cycles(d["cycles"]))
    return _page(body, refresh)


def render_absent(*, refresh: int = 0) -> str:
    """The page of a process that runs no scheduler (this port still serves the metrics and health)."""
    return _page('<h1>busched</h1><p id="absent">No scheduler runs in this process: there is no status to show. '
                 "<code>/metrics</code>, <code>/healthz</code> and <code>/readyz</code> are served here.</p>",
                 refresh)
