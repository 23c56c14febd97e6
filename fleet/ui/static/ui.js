// fleet operator UI: confirm dialogs for actions, live updates from task event streams.
// No build step, no dependencies: plain DOM, EventSource and fetch.
"use strict";

(function () {
  const NONE = "\u2013";

  function announce(text) {
    const el = document.getElementById("announce");
    if (el) el.textContent = text;
  }

  // -- confirmations ------------------------------------------------------------------------
  document.addEventListener("submit", function (e) {
    const form = e.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
    if (form.dataset.confirmed === "yes") return;
    e.preventDefault();
    const go = function () {
      const field = document.createElement("input");
      field.type = "hidden";
      field.name = "confirmed";
      field.value = "yes";
      form.appendChild(field);
      form.dataset.confirmed = "yes";
      form.submit();
    };
    const dialog = document.getElementById("confirm");
    if (!dialog || typeof dialog.showModal !== "function") {
      if (window.confirm(form.dataset.confirm)) go();
      return;
    }
    document.getElementById("confirm-text").textContent = form.dataset.confirm;
    dialog.returnValue = "";
    dialog.addEventListener("close", function once() {
      dialog.removeEventListener("close", once);
      if (dialog.returnValue === "yes") go();
      else {
        const button = form.querySelector("button");
        if (button) button.focus();
      }
    });
    dialog.showModal();
  });

  // -- rendering one step -------------------------------------------------------------------
  function text(value) {
    if (value === null || value === undefined) return "";
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }

  function cell(tag, content, cls) {
    const el = document.createElement(tag);
    if (cls) el.className = cls;
    if (content instanceof Node) el.appendChild(content);
    else el.textContent = content;
    return el;
  }

  function pre(value) {
    const t = text(value);
    const p = document.createElement("pre");
    p.textContent = t.length > 400 ? t.slice(0, 399) + "\u2026" : t;
    return p;
  }

  function callCell(s) {
    const td = document.createElement("td");
    td.appendChild(cell("span", s.kind, "kind " + s.kind));
    td.appendChild(document.createTextNode(" " + s.name));
    if (s.replayed) td.appendChild(cell("span", "replayed", "mark"));
    if (s.status === "started") td.appendChild(cell("span", "in flight", "mark bad"));
    return td;
  }

  function stepRow(s) {
    const tr = document.createElement("tr");
    tr.dataset.step = String(s.step);
    tr.className = "fresh";
    const th = cell("th", String(s.step), "num");
    th.scope = "row";
    tr.appendChild(th);
    tr.appendChild(callCell(s));
    if (s.model) {
      tr.appendChild(cell("td", (s.model.messages === null ? NONE : s.model.messages) + " messages"));
      const out = document.createElement("td");
      if (s.model.toolCalls && s.model.toolCalls.length) {
        out.textContent = "\u2192 " + s.model.toolCalls.map(function (c) { return c.name; }).join(", ");
      } else {
        out.appendChild(pre(s.model.content || ""));
      }
      if (s.error) out.appendChild(cell("div", s.error, "bad"));
      tr.appendChild(out);
      tr.appendChild(cell("td", s.model.tokens.prompt + " \u2192 " + s.model.tokens.completion, "num"));
    } else if (s.wait) {
      tr.appendChild(cell("td", s.wait.model || NONE));
      tr.appendChild(cell("td", s.wait.text || NONE));
      tr.appendChild(cell("td", NONE, "num"));
    } else {
      tr.appendChild(cell("td", pre(s.tool ? s.tool.arguments : null)));
      const out = document.createElement("td");
      if (s.error) out.appendChild(cell("div", s.error, "bad"));
      out.appendChild(pre(s.tool ? s.tool.result : null));
      tr.appendChild(out);
      tr.appendChild(cell("td", NONE, "num"));
    }
    tr.appendChild(cell("td", s.durationMs === null ? NONE : s.durationMs.toFixed(1), "num"));
    tr.appendChild(cell("td", (s.startedAt || "").slice(0, 19).replace("T", " ")));
    return tr;
  }

  function stepItem(s) {
    const li = document.createElement("li");
    li.className = "fresh";
    li.dataset.step = String(s.step);
    let what = "step " + s.step + ": " + s.kind + " " + s.name;
    if (s.model) {
      const calls = (s.model.toolCalls || []).map(function (c) { return c.name; });
      what += calls.length ? " \u2192 " + calls.join(", ") : ": " + text(s.model.content).slice(0, 120);
    } else if (s.wait) {
      what += ": " + s.wait.text;
    } else if (s.tool) {
      what += " " + text(s.tool.arguments).slice(0, 80) + " \u2192 " + text(s.tool.result).slice(0, 120);
    }
    what += " (" + (s.durationMs || 0).toFixed(1) + " ms)";
    li.textContent = what;
    return li;
  }

  // -- the text a model step is writing ------------------------------------------------------
  // A step's deltas since the last reset are its text so far; its step event (or the reply,
  // or the task's end) then stands for them. Each list shows at most one such text: a row of
  // the run page's timeline, an item of the conversation page's live steps.
  function writingKey(d) {
    return d.attempt + "." + d.step;
  }

  function writingRow(d) {
    const tr = document.createElement("tr");
    tr.className = "writing";
    tr.dataset.writing = writingKey(d);
    const th = cell("th", String(d.step), "num");
    th.scope = "row";
    tr.appendChild(th);
    const call = document.createElement("td");
    call.appendChild(cell("span", "model", "kind model"));
    call.appendChild(cell("span", "writing\u2026", "mark"));
    tr.appendChild(call);
    tr.appendChild(cell("td", NONE));
    tr.appendChild(cell("td", cell("pre", "", "text")));
    tr.appendChild(cell("td", NONE, "num"));
    tr.appendChild(cell("td", NONE, "num"));
    tr.appendChild(cell("td", NONE));
    return tr;
  }

  function writingItem(d) {
    const li = document.createElement("li");
    li.className = "writing";
    li.dataset.writing = writingKey(d);
    li.appendChild(document.createTextNode("step " + d.step + ": model"));
    li.appendChild(cell("span", "writing\u2026", "mark"));
    li.appendChild(document.createTextNode(" "));
    li.appendChild(cell("span", "", "text"));
    return li;
  }

  // Add a delta's text to its step's element in `list` (made by `make` on its first delta). A
  // reset voids the text before it; another step's element goes (its text is void, or stood
  // for already). Model text is untrusted: text nodes only.
  function write(list, d, make) {
    let el = list.querySelector("[data-writing]");
    if (el && el.dataset.writing !== writingKey(d)) {
      el.remove();
      el = null;
    }
    if (!el) {
      el = make(d);
      list.appendChild(el);
    }
    const out = el.querySelector(".text");
    if (d.reset) out.textContent = d.text;
    else out.appendChild(document.createTextNode(d.text));
    if (out.scrollHeight > out.clientHeight) out.scrollTop = out.scrollHeight;
  }

  // Remove the text being written in `list`: any, or only that of step `key` ("attempt.step").
  function written(list, key) {
    if (!list) return;
    list.querySelectorAll("[data-writing]").forEach(function (el) {
      if (key === undefined || el.dataset.writing === key) el.remove();
    });
  }

  // -- following a task ---------------------------------------------------------------------
  // The event (by id) whose "waiting" status each task's page was read again for.
  const refreshedOn = {};

  function setStatus(selector, status) {
    document.querySelectorAll(selector).forEach(function (el) {
      el.textContent = status;
      el.className = "badge " + status;
    });
  }

  function refresh(ids) {
    return fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        const doc = new DOMParser().parseFromString(html, "text/html");
        ids.forEach(function (id) {
          const now = document.getElementById(id);
          const fresh = doc.getElementById(id);
          // A finished task's live steps stay until another task is there to follow.
          if (now && fresh && now.dataset.events && !fresh.dataset.events) return;
          if (now && fresh) now.replaceWith(document.importNode(fresh, true));
        });
        start();
      });
  }

  function follow(section) {
    if (section.dataset.following) return;
    section.dataset.following = "yes";
    let url = section.dataset.events;
    if (section.dataset.after) url += "?after=" + encodeURIComponent(section.dataset.after);
    const source = new EventSource(url);
    const data = function (e) { return JSON.parse(e.data); };

    source.addEventListener("status", function (e) {
      const d = data(e);
      setStatus('[data-status-of="' + d.taskId + '"]', d.status);
      if (d.runId) setStatus('[data-run-status="' + d.runId + '"]', d.status);
      const rows = document.getElementById("step-rows");
      const other = document.getElementById("other-run");
      if (d.status === "running" && rows && other && d.runId !== rows.dataset.run) {
        other.textContent = "";
        other.appendChild(document.createTextNode("Attempt " + d.attempt + " started: "));
        const a = cell("a", "its run page");
        a.href = "/ui/runs/" + d.runId;
        other.appendChild(a);
        other.hidden = false;
      }
      announce("Task " + d.status);
      // An attempt that ends (interrupted, or the task's final status) voids the text its
      // unfinished step was writing.
      if (d.status !== "running") {
        written(document.getElementById("step-rows"));
        written(document.getElementById("live-steps"));
      }
      // A task that starts waiting shows what it waits for (the approvals' buttons): the
      // page's sections are read again and followed again. Once per event: a section that
      // follows its task from the start sees the same event again.
      const ids = (section.dataset.refresh || "").split(" ").filter(Boolean);
      if (d.status === "waiting" && ids.length && !section.querySelector(".approvals")
          && refreshedOn[d.taskId] !== e.lastEventId) {
        refreshedOn[d.taskId] = e.lastEventId;
        source.close();
        refresh(ids);
      }
    });

    source.addEventListener("delta", function (e) {
      const d = data(e);
      const rows = document.getElementById("step-rows");
      if (rows && rows.dataset.run === d.runId) write(rows, d, writingRow);
      const list = document.getElementById("live-steps");
      if (list && list.dataset.task === section.dataset.task) write(list, d, writingItem);
    });

    const onStep = function (e) {
      const s = data(e);
      const rows = document.getElementById("step-rows");
      const list = document.getElementById("live-steps");
      if (e.type === "step") {  // it stands for the text its deltas wrote
        written(rows, writingKey(s));
        written(list, writingKey(s));
      }
      if (rows && rows.dataset.run === s.runId) {
        const row = stepRow(s);
        const old = rows.querySelector('tr[data-step="' + s.step + '"]');
        if (old) old.replaceWith(row);
        else rows.appendChild(row);
      }
      if (list && list.dataset.task === s.taskId) {
        const old = list.querySelector('li[data-step="' + s.step + '"]');
        if (!old) list.appendChild(stepItem(s));
      }
      announce("Step " + s.step + ": " + s.kind + " " + s.name);
    };
    source.addEventListener("step", onStep);
    source.addEventListener("inbox", onStep);

    source.addEventListener("reply", function (e) {
      const d = data(e);
      const list = document.getElementById("live-steps");
      written(document.getElementById("step-rows"));
      written(list);
      if (list && list.dataset.task === d.taskId) {
        list.appendChild(cell("li", "reply: " + d.reply, "fresh reply"));
      }
    });

    source.addEventListener("end", function (e) {
      source.close();
      const d = data(e);
      written(document.getElementById("step-rows"));
      written(document.getElementById("live-steps"));
      announce("Task finished: " + d.task.status);
      const ids = (section.dataset.refresh || "").split(" ").filter(Boolean);
      if (ids.length) refresh(ids);
    });
  }

  function start() {
    document.querySelectorAll("[data-events]").forEach(follow);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
