// bakery serve's operator page: follows /v1/overview/events (Server-Sent
// Events read with fetch, so a bearer token can go with them) and renders
// each overview. Every value from the server goes in as text, never markup.

const TOKEN_KEY = "bakery.token";
const RETRY_MS = 1000;

const $ = (id) => document.getElementById(id);

/** Make an element with text or children. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    // data-*, aria-* and the like are attributes, not properties.
    else if (key.includes("-")) node.setAttribute(key, String(value));
    else node[key] = value;
  }
  for (const child of children) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function setStatus(state, text) {
  const status = $("status");
  status.dataset.state = state;
  status.textContent = text;
}

function watched() {
  return new URLSearchParams(location.search).get("watch") ?? "";
}

function ms(value) {
  if (value >= 60_000) return `${(value / 60_000).toFixed(1)} min`;
  if (value >= 1_000) return `${(value / 1_000).toFixed(1)} s`;
  return `${Math.max(0, Math.round(value))} ms`;
}

// Countdowns: each element with data-left-ms counts down from the moment
// its overview arrived, between events.
let arrived = performance.now();
function tick() {
  const elapsed = performance.now() - arrived;
  for (const node of document.querySelectorAll("[data-left-ms]")) {
    const left = Math.max(0, Number(node.dataset.leftMs) - elapsed);
    const total = Number(node.dataset.totalMs || 0);
    const text = node.querySelector(".left-text") ?? node;
    text.textContent = ms(left);
    const bar = node.querySelector("meter");
    if (bar) bar.value = total > 0 ? left / total : 0;
    node.classList.toggle("expiring", total > 0 && left < total / 3);
  }
}
setInterval(tick, 250);

function party(p, leftMs, holder) {
  const item = el(
    "li",
    {
      class: holder ? "holder" : "waiter",
      "data-owner": p.owner,
      "data-token": p.token,
      "data-mode": p.mode,
    },
    el("span", { class: "owner" }, p.owner),
  );
  if (p.mode) item.append(" ", el("span", { class: `badge ${p.mode}` }, p.mode));
  if (holder && p.token !== undefined) item.append(" ", el("span", { class: "token" }, `token ${p.token}`));
  if (p.data) item.append(el("div", { class: "data dim" }, p.data));
  if (holder && leftMs !== undefined) {
    item.append(
      el(
        "div",
        { class: "lease", "data-left-ms": leftMs, "data-total-ms": p.lease_ms, title: "lease left" },
        el("meter", { min: 0, max: 1, value: p.lease_ms ? leftMs / p.lease_ms : 0 }),
        " ",
        el("span", { class: "left-text" }, ms(leftMs)),
      ),
    );
  }
  return item;
}

function grantCard(g) {
  const member = `${g.family}/${g.name}`;
  const card = el("article", { class: "card", "data-member": member });
  const title = el("h3", {}, el("span", { class: "family" }, g.family), " ", g.name);
  card.append(title);
  // An election's token is its term: the leader's, or the last one's.
  const facts = el("p", { class: "facts dim" }, g.family === "elections" ? `term ${g.token}` : `last token ${g.token}`);
  if (g.permits !== undefined) facts.append(` · ${g.holders.length}/${g.permits} permits held`);
  card.append(facts);
  const holders = el("ul", { class: "holders", "aria-label": "holders" });
  g.holders.forEach((h, i) => holders.append(party(h, g.lease_left_ms[i], true)));
  if (g.holders.length === 0) holders.append(el("li", { class: "free dim" }, "free"));
  card.append(el("h4", {}, g.family === "elections" ? "leader" : "held by"), holders);
  const queue = el("ol", { class: "queue", "aria-label": "queue" });
  for (const w of g.queue) queue.append(party(w, undefined, false));
  card.append(el("h4", {}, `waiting (${g.queue.length})`), queue);
  return card;
}

function render(overview) {
  arrived = performance.now();
  const grants = overview.grants.filter((g) => g.family !== "elections");
  const leaders = overview.grants.filter((g) => g.family === "elections");
  $("grants").replaceChildren(
    ...(grants.length ? grants.map(grantCard) : [el("p", { class: "empty" }, "Nothing taken through this instance yet.")]),
  );
  $("leaders").replaceChildren(
    ...(leaders.length ? leaders.map(grantCard) : [el("p", { class: "empty" }, "No election yet.")]),
  );

  $("sequences").tBodies[0].replaceChildren(
    ...overview.sequences.map((s) =>
      el(
        "tr",
        { "data-sequence": s.name },
        el("td", {}, s.name),
        el("td", { class: "num next" }, s.next),
        el("td", { class: "num" }, s.block_size),
        el("td", { class: "dim" }, s.node),
        el("td", {}, s.closed ? "closed (handed back)" : "open"),
      ),
    ),
  );

  $("sessions").tBodies[0].replaceChildren(
    ...overview.sessions.map((s) =>
      el(
        "tr",
        { "data-session": s.id },
        el("td", { class: "mono" }, s.id),
        el("td", { class: "num" }, ms(s.ttl_ms)),
        el("td", { class: "num", "data-left-ms": s.expires_in_ms }, ms(s.expires_in_ms)),
        el(
          "td",
          {},
          s.grants.length
            ? s.grants.map((g) => `${g.family}/${g.name} #${g.token}${g.held ? "" : " (lost)"}`).join(", ")
            : "—",
        ),
      ),
    ),
  );

  const missing = $("missing");
  missing.hidden = overview.missing.length === 0;
  missing.textContent = `Nothing stored yet for ${overview.missing.join(", ")}.`;
  setStatus("live", `live · updated ${new Date().toLocaleTimeString()}`);
}

/** Split an SSE byte stream into events and hand each to `onEvent`. */
async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = text;
        else if (field === "data") data.push(text);
      }
      if (data.length) onEvent(event, data.join("\n"));
    }
  }
}

let connection = null;

async function follow() {
  connection?.abort();
  const controller = new AbortController();
  connection = controller;
  const token = sessionStorage.getItem(TOKEN_KEY);
  const query = new URLSearchParams();
  if (watched()) query.set("watch", watched());
  const headers = { Accept: "text/event-stream" };
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    const response = await fetch(`/v1/overview/events?${query}`, { headers, signal: controller.signal });
    if (response.status === 401 || response.status === 403) {
      const body = await response.json().catch(() => ({}));
      $("token-form").hidden = false;
      setStatus("auth", body.message ?? `HTTP ${response.status}`);
      return;
    }
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error(body.message ?? `HTTP ${response.status}`);
    }
    $("token-form").hidden = true;
    await readEvents(response.body, (event, data) => {
      if (event === "overview") render(JSON.parse(data));
      else if (event === "error") setStatus("error", `the store failed a read: ${data}`);
    });
    if (controller.signal.aborted) return;
    setStatus("reconnecting", "stream ended, reconnecting…");
  } catch (err) {
    if (controller.signal.aborted) return;
    setStatus("reconnecting", `${err.message ?? err}; reconnecting…`);
  }
  setTimeout(() => connection === controller && follow(), RETRY_MS);
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value);
  $("token").value = "";
  follow();
});

$("watch-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const item = $("watch").value.trim();
  if (!item) return;
  const list = watched().split(",").filter(Boolean);
  if (!list.includes(item)) list.push(item);
  const params = new URLSearchParams(location.search);
  params.set("watch", list.join(","));
  history.replaceState(null, "", `${location.pathname}?${params}`);
  $("watch").value = "";
  follow();
});

follow();
