// The live run viewer of `little serve` (/ui). No build step, no dependency.
//
// Pages are shells: this script fetches their content (HTML fragments the server renders,
// every value escaped there) with the bearer token the person enters once, kept in this
// tab's sessionStorage only. A running run's page follows the run's Server-Sent Events with
// fetch() and a stream reader (EventSource cannot send an Authorization header), resuming
// with Last-Event-ID after a dropped connection, and fetches its fragment again as events
// come, so the timeline grows without a reload. Text from events is only ever set as
// textContent.
"use strict";

(() => {
  const KEY = "little.viewer.token";
  const ENDS = new Set(["RunCompleted", "RunFailed"]);
  const $ = (id) => document.getElementById(id);

  class Stop extends Error {}

  const token = () => sessionStorage.getItem(KEY);
  const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

  function say(text) {
    const box = $("message");
    box.textContent = text || "";
    box.hidden = !text;
  }

  function askToken(text) {
    $("token-form").hidden = false;
    $("forget-token").hidden = true;
    say(text || "Enter an API token with the scope runs:read (kept in this tab only).");
  }

  async function detail(answer) {
    try {
      const body = await answer.json();
      return body.detail || answer.statusText;
    } catch (error) {
      return `${answer.status} ${answer.statusText}`;
    }
  }

  async function api(path, options = {}) {
    const headers = Object.assign({}, options.headers || {}, {
      Authorization: `Bearer ${token()}`,
    });
    const answer = await fetch(path, Object.assign({}, options, {
      headers, cache: "no-store", credentials: "omit",
    }));
    if (answer.status === 401) {
      sessionStorage.removeItem(KEY);
      askToken(await detail(answer));
      throw new Stop();
    }
    return answer;
  }

  // The page's content, fetched again; the new root element (or null on a refusal).
  async function load() {
    const content = $("content");
    const answer = await api(content.dataset.fragment);
    if (!answer.ok) {
      say(await detail(answer));
      return null;
    }
    content.innerHTML = await answer.text(); // server-rendered: every value escaped there
    const cancel = $("cancel-run");
    if (cancel) cancel.addEventListener("click", () => cancelRun(cancel));
    for (const button of content.querySelectorAll(".approval button[data-decision]")) {
      button.addEventListener("click", () => decide(button));
    }
    return content.firstElementChild;
  }

  let loading = null;
  let again = false;
  let timer = null;

  // Fetch the fragment again soon: events come in bursts, one fetch serves a burst.
  function refreshSoon() {
    if (timer !== null) return;
    timer = setTimeout(() => {
      timer = null;
      refresh();
    }, 100);
  }

  function refresh() {
    if (loading) {
      again = true;
      return loading;
    }
    loading = load().catch(swallow).finally(() => {
      loading = null;
      if (again) {
        again = false;
        refresh();
      }
    });
    return loading;
  }

  function swallow(error) {
    if (!(error instanceof Stop)) say(`The viewer lost the server: ${error.message || error}`);
    return null;
  }

  async function cancelRun(button) {
    button.disabled = true;
    try {
      const answer = await api(
        `/v1/runs/${encodeURIComponent(button.dataset.runId)}/cancel`,
        {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ reason: "cancelled in the viewer" }),
        },
      );
      say(answer.ok ? "Cancel requested: the run stops at its next step." : await detail(answer));
    } catch (error) {
      swallow(error);
    }
    refresh();
  }

  // Approve or reject a held tool call (POST /v1/approvals/{id}, scope approvals:decide);
  // the decision's event comes down the run's stream and the page is fetched again.
  async function decide(button) {
    const box = button.closest(".approval");
    for (const other of box.querySelectorAll("button")) other.disabled = true;
    const reason = box.querySelector(".approval-reason").value.trim();
    const body = { decision: button.dataset.decision };
    if (reason) body.reason = reason;
    try {
      const answer = await api(
        `/v1/approvals/${encodeURIComponent(button.dataset.approvalId)}`,
        {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify(body),
        },
      );
      if (answer.ok) {
        const decided = await answer.json();
        say(`Tool call ${decided.status} (${decided.toolName}): the step resumes on a worker.`);
      } else {
        say(await detail(answer));
      }
    } catch (error) {
      swallow(error);
    }
    refresh();
  }

  function parse(block) {
    const message = { id: null, event: "message", data: "" };
    let seen = false;
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const at = line.indexOf(":");
      const name = at < 0 ? line : line.slice(0, at);
      const value = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
      if (name === "id") message.id = Number(value);
      else if (name === "event") message.event = value;
      else if (name === "data") {
        message.data += value;
        seen = true;
      }
    }
    return seen ? message : null;
  }

  // Follow the run's events from `after` until its end event; reconnect after a drop.
  async function follow(runId, after) {
    let last = after;
    for (;;) {
      let ended = false;
      try {
        const answer = await api(`/v1/runs/${encodeURIComponent(runId)}/events`, {
          headers: { Accept: "text/event-stream", "Last-Event-ID": String(last) },
        });
        if (!answer.ok) {
          say(await detail(answer));
          return;
        }
        const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value.replace(/\r\n?/g, "\n");
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const message = parse(buffer.slice(0, cut));
            buffer = buffer.slice(cut + 2);
            if (message === null) continue;
            if (message.id !== null) last = message.id;
            const live = $("live");
            if (live) live.textContent = `last event #${last} ${message.event}`;
            if (ENDS.has(message.event)) ended = true;
            refreshSoon();
          }
        }
      } catch (error) {
        if (error instanceof Stop) return;
      }
      if (ended) return;
      const root = await refresh();
      if (root && root.dataset.ended === "1") return;
      await sleep(1000);
    }
  }

  async function start() {
    $("token-form").hidden = true;
    $("forget-token").hidden = false;
    say("");
    const root = await refresh();
    if (root && document.body.dataset.page === "run" && root.dataset.ended === "0") {
      follow(root.dataset.runId, Number(root.dataset.lastSequence));
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const input = $("token-input");
      const value = input.value.trim();
      if (!value) return;
      sessionStorage.setItem(KEY, value);
      input.value = "";
      start();
    });
    $("forget-token").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      $("content").textContent = "";
      askToken();
    });
    if (token()) start();
    else askToken();
  });
})();
