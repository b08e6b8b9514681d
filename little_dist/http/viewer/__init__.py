"""The live run viewer, served by ``little serve`` under ``/ui``.

Server-rendered HTML and one small static script (``static/viewer.js``, shipped in the
wheel: no build step). The pages are shells; the script fetches their content (fragments
rendered here) with the bearer token the person enters once, kept in the tab's
``sessionStorage``, and follows a run's Server-Sent Events with ``fetch`` (``EventSource``
cannot send an ``Authorization`` header), fetching the run's fragment again as events come:
the timeline grows without a reload.

* :mod:`.routes` — ``install_viewer(app, fleet)``: the pages, fragments and static files;
* :mod:`.pages` — the HTML (the report's own timeline, summary and step table);
* :mod:`.calls` — each step's attempts with their model and tool calls.
"""

from __future__ import annotations

__all__: list[str] = []
