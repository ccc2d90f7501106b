"""The sandbox page: plain HTML, a little CSS and vanilla JS (no framework, no external requests).

Everything user-, tool- or model-written is put in the DOM with textContent, never innerHTML.
"""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>opsloop sandbox · #incident</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  :root { --fg:#1d1c1d; --muted:#616061; --line:#e8e8e8; --green:#007a5a; --red:#e01e5a; --blue:#1264a3;
          --yellow:#ecb22e; --bg:#fff; --side:#3f0e40; }
  * { box-sizing: border-box; }
  body { margin:0; font: 15px/1.46 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
         color:var(--fg); background:var(--bg); display:flex; min-height:100vh; }
  aside { width:200px; background:var(--side); color:#fff; padding:16px 14px; flex:none; }
  aside h1 { font-size:17px; margin:0 0 18px; }
  aside .chan { background:#1164a3; border-radius:6px; padding:3px 10px; font-weight:600; }
  aside .note { font-size:12px; opacity:.75; margin-top:22px; line-height:1.4; }
  main { flex:1; display:flex; flex-direction:column; max-width:980px; }
  header { border-bottom:1px solid var(--line); padding:12px 20px; display:flex; align-items:center; gap:14px; }
  header b { font-size:18px; }
  header .model { color:var(--muted); font-size:13px; }
  header label { margin-left:auto; font-size:14px; }
  #threads { flex:1; overflow-y:auto; padding:8px 0 20px; }
  .thread { border-bottom:1px solid var(--line); padding:6px 0 10px; }
  .replies { margin-left:58px; border-left:3px solid var(--line); padding-left:6px; }
  .msg { display:flex; gap:10px; padding:6px 20px 6px 16px; }
  .avatar { width:36px; height:36px; border-radius:6px; flex:none; color:#fff; font-weight:700;
            display:flex; align-items:center; justify-content:center; font-size:16px; }
  .body { flex:1; min-width:0; }
  .author { font-weight:800; }
  .author .app { font-size:10px; font-weight:600; background:#ddd; color:#555; border-radius:3px; padding:0 4px;
                 margin-left:4px; vertical-align:2px; }
  .part { white-space:pre-wrap; word-wrap:break-word; margin:2px 0; }
  .header { font-weight:800; font-size:16px; margin-top:2px; }
  .context { color:var(--muted); font-size:13px; }
  pre { background:#f8f8f8; border:1px solid var(--line); border-radius:4px; padding:6px 8px; margin:4px 0;
        white-space:pre-wrap; font: 12.5px/1.4 Menlo, Consolas, monospace; }
  code { font: 12.5px Menlo, Consolas, monospace; color:#c01343; background:#f6f6f6; border:1px solid #e6e6e6;
         border-radius:3px; padding:0 3px; }
  .card { border:1px solid var(--line); border-left:4px solid var(--yellow); border-radius:6px; padding:8px 12px;
          margin-top:4px; background:#fffdf6; }
  .card.approved { border-left-color:var(--green); background:#f5fbf8; }
  .card.denied, .card.expired { border-left-color:var(--red); background:#fdf6f8; }
  .card.superseded { border-left-color:var(--blue); background:#f5f9fd; }
  .kind-status .part { color:#444; }
  .kind-note .part { color:#555; font-style:italic; }
  .actions { display:flex; gap:8px; margin-top:6px; }
  button { font: inherit; font-size:14px; font-weight:700; border-radius:4px; padding:4px 14px; cursor:pointer;
           border:1px solid #bbb; background:#fff; color:var(--fg); }
  button.primary { background:var(--green); border-color:var(--green); color:#fff; }
  button.danger { color:var(--red); border-color:#e8a1b6; }
  .confirm { border:1px solid #ccc; border-radius:6px; padding:8px 12px; margin-top:6px; background:#fff;
             box-shadow:0 2px 8px rgba(0,0,0,.12); max-width:520px; }
  .confirm .title { font-weight:800; }
  .reactions span { display:inline-block; border:1px solid #d6e4f0; background:#eef5fb; border-radius:12px;
                    padding:0 8px; font-size:13px; margin-top:4px; }
  .ephemeral { color:var(--muted); font-size:13px; font-style:italic; margin:4px 20px 4px 16px; }
  form { display:flex; gap:8px; }
  form input { flex:1; font:inherit; padding:7px 10px; border:1px solid #bbb; border-radius:6px; }
  .reply { margin:6px 20px 2px 16px; }
  .reply input { font-size:14px; padding:5px 9px; }
  #compose { border-top:1px solid var(--line); padding:12px 20px 16px; }
  select { font:inherit; padding:3px 6px; }
  .empty { color:var(--muted); padding:30px 20px; }
  aside .nav { border-radius:6px; padding:3px 10px; cursor:pointer; margin-bottom:4px; }
  aside .nav.on { background:#1164a3; font-weight:600; }
  .plan { border:1px solid var(--line); border-radius:8px; padding:6px 10px; margin:4px 0; background:#fafafa;
          max-width:640px; }
  .plan .ptitle { font-weight:700; font-size:13px; color:#444; margin-bottom:2px; }
  .task { display:flex; gap:8px; align-items:baseline; font-size:14px; padding:1px 0; }
  .task .icon { width:16px; flex:none; text-align:center; font-weight:700; }
  .task[data-status=pending] .icon { color:#999; }
  .task[data-status=in_progress] .icon { color:var(--blue); }
  .task[data-status=complete] .icon { color:var(--green); }
  .task[data-status=error] .icon { color:var(--red); }
  .task .out { color:var(--muted); font-size:13px; }
  .loading { color:var(--muted); font-size:13px; font-style:italic; margin:2px 20px 2px 16px; }
  .loading::before { content:"● "; color:var(--blue); font-style:normal; }
  .streaming { display:inline-block; font-size:11px; color:var(--blue); border:1px solid #b9d3ea;
               border-radius:3px; padding:0 5px; margin-left:6px; }
  .feedback { display:flex; gap:6px; margin-top:4px; align-items:center; }
  .feedback button { font-weight:400; padding:1px 9px; border-radius:12px; }
  .feedback button.chosen { background:#e8f5fa; border-color:var(--blue); }
  .feedback .noted { color:var(--muted); font-size:12px; }
  .msg { position:relative; }
  .more { position:absolute; right:16px; top:4px; padding:0 8px; font-size:13px; opacity:.55; }
  .menu { position:absolute; right:16px; top:28px; z-index:2; background:#fff; border:1px solid #ccc;
          border-radius:6px; box-shadow:0 2px 8px rgba(0,0,0,.15); padding:4px 0; }
  .menu button { border:0; border-radius:0; width:100%; text-align:left; font-weight:400; padding:5px 14px; }
  .menu button:hover { background:var(--blue); color:#fff; }
  #home { flex:1; overflow-y:auto; padding:14px 22px; display:none; }
  body.on-home #home { display:block; }
  body.on-home #threads, body.on-home #compose { display:none; }
</style>
</head>
<body>
<aside><h1>opsloop sandbox</h1><div class="nav on" id="chan-tab"># incident</div>
<div class="nav" id="home-tab">⌂ opsloop · Home</div>
<div class="note">A local Slack stand-in. Messages and button clicks reach the real opsloop app as Slack events
and interactivity payloads over Socket Mode.</div><div class="note" id="about"></div></aside>
<main>
  <header><b># incident</b><span class="model" id="model"></span>
    <label>You are <select id="user"></select></label></header>
  <div id="threads"><div class="empty">Loading…</div></div>
  <div id="home"><div class="empty">Opening the Home tab…</div></div>
  <form id="compose" autocomplete="off">
    <input id="text" placeholder="@opsloop web-03 is out of disk, deal with it">
    <button id="send" class="primary" type="submit">Mention @opsloop</button>
  </form>
</main>
<script>
"use strict";
const COLORS = {alice: "#2eb67d", bob: "#1264a3", carol: "#e01e5a", opsloop: "#4a154b"};
let state = null, version = -1, confirming = null, menuFor = null, onHome = false;
const ICONS = {pending: "○", in_progress: "◐", complete: "✓", error: "✕"};
const drafts = {};
const me = () => document.getElementById("user").value;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function inline(parent, text) {  // `code` spans; everything else as text
  text.split("`").forEach((chunk, i) => {
    if (!chunk) return;
    parent.appendChild(i % 2 ? el("code", null, chunk) : document.createTextNode(chunk));
  });
  return parent;
}

async function send(path, body) {
  const r = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"},
                               body: JSON.stringify(body)});
  if (!r.ok) alert(await r.text());
}

function button(m, b) {
  const btn = el("button", b.style || "", b.text);
  btn.dataset.action = b.action_id;
  btn.addEventListener("click", () => {
    if (b.confirm) { confirming = {ts: m.ts, action: b.action_id, dialog: b.confirm}; render(); }
    else send("/api/click", {user: me(), ts: m.ts, action_id: b.action_id});
  });
  return btn;
}

function confirmBox(m) {
  const [title, text, ok, cancel] = confirming.dialog;
  const box = el("div", "confirm");
  box.appendChild(el("div", "title", title));
  box.appendChild(el("div", "part", text));
  const row = el("div", "actions");
  const yes = el("button", "primary ok", ok || "Confirm");
  const action = confirming.action;
  yes.addEventListener("click", () => {
    confirming = null; render(); send("/api/click", {user: me(), ts: m.ts, action_id: action});
  });
  const no = el("button", "cancel", cancel || "Cancel");
  no.addEventListener("click", () => { confirming = null; render(); });
  row.append(yes, no);
  box.appendChild(row);
  return box;
}

function plan(p) {  // a plan block: its title and one row per task card, with a status icon
  const box = el("div", "plan");
  const lines = p.text.split("\\n");
  if (p.tasks.length < lines.length) box.appendChild(el("div", "ptitle", lines[0]));
  for (const t of p.tasks) {
    const row = el("div", "task");
    row.dataset.status = t.status; row.dataset.task = t.task_id;
    row.appendChild(el("span", "icon", ICONS[t.status] || "·"));
    const words = el("span", "what", t.title);
    if (t.output) { words.appendChild(document.createTextNode(" — ")); words.appendChild(el("span", "out", t.output)); }
    row.appendChild(words);
    box.appendChild(row);
  }
  return box;
}

function feedback(m, p) {  // feedback_buttons: a click goes to the app as block_actions; the store's record shows
  const row = el("div", "feedback");
  const mine = (state.feedback || []).filter(f => f.ts === m.ts && f.user_id === me());
  for (const b of p.buttons) {
    const way = (b.value || "").split(":")[0];
    const btn = el("button", mine.some(f => f.value === way) ? "chosen" : "", b.text);
    btn.dataset.action = b.action_id; btn.dataset.value = way;
    btn.addEventListener("click", () => send("/api/feedback", {user: me(), ts: m.ts, value: way}));
    row.appendChild(btn);
  }
  if (mine.length) row.appendChild(el("span", "noted", "Feedback recorded: " + mine[mine.length - 1].value));
  return row;
}

function messageMenu(m, row) {  // the message's "more actions" menu, with the opsloop shortcut
  const more = el("button", "more", "⋯");
  more.title = "More actions";
  more.addEventListener("click", () => { menuFor = menuFor === m.ts ? null : m.ts; render(); });
  row.appendChild(more);
  if (menuFor !== m.ts) return;
  const menu = el("div", "menu");
  const item = el("button", "shortcut", "Investigate with opsloop");
  item.dataset.callback = "opsloop.investigate";
  item.addEventListener("click", () => { menuFor = null; render(); send("/api/shortcut", {user: me(), ts: m.ts}); });
  menu.appendChild(item);
  row.appendChild(menu);
}

function message(m) {
  const name = m.author.replace(/^@/, "");
  const row = el("div", "msg kind-" + m.kind);
  row.dataset.kind = m.kind; row.dataset.state = m.state; row.dataset.ts = m.ts;
  const avatar = el("div", "avatar", name[0].toUpperCase());
  avatar.style.background = COLORS[name] || "#777";
  const body = el("div", "body");
  const author = el("div", "author", name);
  if (m.kind !== "person") author.appendChild(el("span", "app", "APP"));
  if (m.stream) {  // a streamed answer: it grows while "streaming…"
    row.dataset.stream = m.stream;
    const marker = {streaming: "streaming…", expired: "stream expired"}[m.stream];
    if (marker) author.appendChild(el("span", "streaming", marker));
  }
  body.appendChild(author);
  const holder = parts(m.kind === "card" ? el("div", "card " + m.state) : body, m.parts, m);
  if (confirming && confirming.ts === m.ts) holder.appendChild(confirmBox(m));
  if (holder !== body) body.appendChild(holder);
  if (m.reactions.length) {
    const r = el("div", "reactions");
    const emoji = {eyes: "👀", white_check_mark: "✅"};
    m.reactions.forEach(n => r.appendChild(el("span", null, (emoji[n] || ":" + n + ":") + " 1")));
    body.appendChild(r);
  }
  row.append(avatar, body);
  messageMenu(m, row);
  return row;
}

function parts(holder, list, m) {  // a message's parts, or a surface's (the Home tab's: no `m`, no buttons)
  for (const p of list) {
    if (p.kind === "code") holder.appendChild(el("pre", null, p.text));
    else if (p.kind === "tasks") holder.appendChild(plan(p));
    else if (p.kind !== "buttons") holder.appendChild(inline(el("div", "part " + p.kind), p.text));
    else if (m && p.buttons.length && p.buttons[0].action_id === "opsloop.feedback") holder.appendChild(feedback(m, p));
    else if (m) {
      const actions = el("div", "actions");
      p.buttons.forEach(b => actions.appendChild(button(m, b)));
      holder.appendChild(actions);
    }
  }
  return holder;
}

let statusTimer = null;
function renderHome() {
  const box = document.getElementById("home");
  box.replaceChildren();
  const view = (state.home || {})[me()];
  if (!view) { box.appendChild(el("div", "empty", "Opening the Home tab…")); return; }
  box.dataset.user = me();
  parts(box, view);
}

function showHome(on) {
  onHome = on;
  document.body.classList.toggle("on-home", on);
  document.getElementById("home-tab").classList.toggle("on", on);
  document.getElementById("chan-tab").classList.toggle("on", !on);
  if (on) send("/api/home", {user: me()});  // Slack sends app_home_opened each time the tab opens
  render();
}

function replyForm(ts) {
  const form = el("form", "reply");
  form.dataset.thread = ts;
  const input = el("input");
  input.placeholder = "Reply in thread…";
  input.value = drafts[ts] || "";
  input.addEventListener("input", () => { drafts[ts] = input.value; });
  const btn = el("button", null, "Reply");
  btn.type = "submit";
  form.append(input, btn);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    drafts[ts] = ""; input.value = "";
    send("/api/post", {user: me(), text, thread_ts: ts});
  });
  return form;
}

function render() {
  if (!state) return;
  const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest(".reply");
  const focusTs = focused ? focused.dataset.thread : null;
  const box = document.getElementById("threads");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  box.replaceChildren();
  if (!state.threads.length) box.appendChild(el("div", "empty", "No messages yet. Mention @opsloop below."));
  for (const t of state.threads) {
    const thread = el("div", "thread");
    thread.dataset.ts = t.root.ts;
    thread.appendChild(message(t.root));
    const replies = el("div", "replies");
    t.replies.forEach(m => replies.appendChild(message(m)));
    state.ephemerals.filter(e => e.user === me() && e.thread_ts === t.root.ts)
      .forEach(e => replies.appendChild(inline(el("div", "ephemeral", "Only visible to you: "), e.text)));
    if (t.status && t.status.expires_in > 0) {  // the loading status under the thread, until Slack drops it
      const line = el("div", "loading", "opsloop " + t.status.text);
      line.dataset.thread = t.root.ts;
      replies.appendChild(line);
      clearTimeout(statusTimer);
      statusTimer = setTimeout(() => { t.status.expires_in = 0; render(); }, t.status.expires_in * 1000);
    }
    replies.appendChild(replyForm(t.root.ts));
    thread.appendChild(replies);
    box.appendChild(thread);
  }
  if (focusTs) { const f = box.querySelector(`.reply[data-thread="${focusTs}"] input`); if (f) f.focus(); }
  if (atBottom) box.scrollTop = box.scrollHeight;
  renderHome();
}

async function poll() {
  for (;;) {
    try {
      const r = await fetch("/api/state?since=" + version);
      state = await r.json();
      version = state.version;
      document.body.dataset.version = version;
      setup();
      render();
    } catch (e) {
      await new Promise(res => setTimeout(res, 1000));
    }
  }
}

function setup() {
  const sel = document.getElementById("user");
  if (sel.options.length) return;
  for (const p of state.people) sel.appendChild(new Option("@" + p.name + " (" + p.id + ")", p.id));
  for (const line of state.about) document.getElementById("about").appendChild(el("p", null, line));
  sel.value = localStorage.getItem("opsloop.user") || state.default_user;
  sel.addEventListener("change", () => {
    localStorage.setItem("opsloop.user", sel.value);
    if (onHome) send("/api/home", {user: sel.value});
    render();
  });
  document.getElementById("home-tab").addEventListener("click", () => showHome(true));
  document.getElementById("chan-tab").addEventListener("click", () => showHome(false));
  document.getElementById("model").textContent = state.model;
  document.getElementById("text").placeholder = "@opsloop " + state.example;
}

document.getElementById("compose").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = document.getElementById("text");
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  send("/api/post", {user: me(), text});
});
poll();
</script>
</body>
</html>
"""
