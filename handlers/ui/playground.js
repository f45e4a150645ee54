// The pooled Playground: chat with the served model and watch the server, from the server's own
// origin (so the Origin guard lets it in), with nothing fetched from anywhere else.
"use strict";

const KEY_STORAGE = "pooled.apiKey";
const CONVERSATIONS_STORAGE = "pooled.conversations";
const SETTINGS_STORAGE = "pooled.settings";
const SAMPLING_FIELDS = ["temperature", "top_p", "top_k", "min_p", "max_tokens", "seed"];
const INTEGER_FIELDS = new Set(["top_k", "max_tokens", "seed"]);
const REFRESH_MS = 2000;
const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

const $ = (id) => document.getElementById(id);

// ---- the API key: asked for on a 401, kept in localStorage, sent as a Bearer token ----

let keyPrompt = null;

function askForKey() {
  if (keyPrompt) return keyPrompt;
  keyPrompt = new Promise((resolve) => {
    const dialog = $("key-dialog");
    $("key-input").value = "";
    dialog.addEventListener(
      "close",
      () => {
        const key = $("key-input").value.trim();
        if (key) localStorage.setItem(KEY_STORAGE, key);
        keyPrompt = null;
        resolve(Boolean(key));
      },
      { once: true },
    );
    dialog.showModal();
  });
  return keyPrompt;
}

async function api(path, options = {}, retry = true) {
  const headers = { ...(options.headers || {}) };
  const key = localStorage.getItem(KEY_STORAGE);
  if (key) headers.Authorization = `Bearer ${key}`;
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401 && retry) {
    localStorage.removeItem(KEY_STORAGE);
    if (await askForKey()) return api(path, options, false);
  }
  return response;
}

async function errorText(response) {
  try {
    const body = await response.json();
    return (body.error && body.error.message) || JSON.stringify(body);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

// ---- conversations, kept in localStorage ----

function loadConversations() {
  try {
    return JSON.parse(localStorage.getItem(CONVERSATIONS_STORAGE)) || [];
  } catch {
    return [];
  }
}

let conversations = loadConversations();
let current = null;

// A message's content is a string, or (a user message with images) a list of OpenAI content
// parts: {type: "text", text} then {type: "image_url", image_url: {url: "data:…"}}.
function messageText(message) {
  const content = message.content || "";
  if (typeof content === "string") return content;
  return content
    .filter((part) => part.type === "text")
    .map((part) => part.text)
    .join("\n");
}

function messageImages(message) {
  if (!Array.isArray(message.content)) return [];
  return message.content.filter((part) => part.type === "image_url").map((part) => part.image_url.url);
}

// Images make conversations large: when localStorage is full, they are kept without their images
// (the page keeps them until it is reloaded).
function saveConversations() {
  try {
    localStorage.setItem(CONVERSATIONS_STORAGE, JSON.stringify(conversations));
  } catch {
    const withoutImages = conversations.map((conversation) => ({
      ...conversation,
      messages: conversation.messages.map((message) =>
        Array.isArray(message.content) ? { ...message, content: messageText(message) } : message,
      ),
    }));
    try {
      localStorage.setItem(CONVERSATIONS_STORAGE, JSON.stringify(withoutImages));
    } catch {
      /* still too large: kept in this page only */
    }
  }
}

function newConversation() {
  current = { id: Date.now().toString(36), title: "New conversation", messages: [] };
  conversations.unshift(current);
  saveConversations();
  renderAll();
}

function renderConversations() {
  const list = $("conversations");
  list.replaceChildren();
  for (const conversation of conversations) {
    const item = document.createElement("li");
    if (conversation === current) item.className = "current";
    const title = document.createElement("span");
    title.textContent = conversation.title;
    item.append(title);
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "link";
    remove.textContent = "×";
    remove.title = "Delete";
    remove.addEventListener("click", (event) => {
      event.stopPropagation();
      conversations = conversations.filter((c) => c !== conversation);
      if (current === conversation) current = conversations[0] || null;
      saveConversations();
      if (!current) newConversation();
      else renderAll();
    });
    item.append(remove);
    item.addEventListener("click", () => {
      if (controller) return;
      current = conversation;
      renderAll();
    });
    list.append(item);
  }
}

// ---- rendering messages ----

// Thinking shows as <think>…</think> in the text (or in reasoning_content): folded away.
function splitThinking(text) {
  const start = text.indexOf("<think>");
  if (start < 0) return { thinking: "", answer: text };
  const end = text.indexOf("</think>", start);
  if (end < 0) return { thinking: text.slice(start + 7), answer: text.slice(0, start) };
  return { thinking: text.slice(start + 7, end), answer: text.slice(0, start) + text.slice(end + 8) };
}

function formatStats(stats) {
  if (!stats) return "";
  const parts = [];
  if (stats.prompt_tokens != null) parts.push(`${stats.prompt_tokens} prompt`);
  if (stats.completion_tokens != null) parts.push(`${stats.completion_tokens} completion tokens`);
  if (stats.ttft_ms != null) parts.push(`first token ${Math.round(stats.ttft_ms)} ms`);
  if (stats.tokens_per_s != null) parts.push(`${stats.tokens_per_s.toFixed(1)} tok/s`);
  if (stats.finish_reason) parts.push(stats.finish_reason);
  if (stats.stopped) parts.push("stopped");
  return parts.join(" · ");
}

function renderMessage(message, index) {
  const box = document.createElement("div");
  box.className = `message ${message.role}${message.error ? " error" : ""}`;
  box.dataset.index = index;
  const split = splitThinking(messageText(message));
  const thinking = (message.reasoning || "") + split.thinking;
  if (thinking) {
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = "Thinking";
    details.append(summary, document.createTextNode(thinking));
    box.append(details);
  }
  const text = document.createElement("div");
  text.className = "text";
  text.textContent = split.answer;
  box.append(text);
  const images = messageImages(message);
  if (images.length) {
    const row = document.createElement("div");
    row.className = "images";
    for (const url of images) {
      const image = document.createElement("img");
      image.className = "thumb";
      image.alt = "an attached image";
      image.src = url;
      row.append(image);
    }
    box.append(row);
  }
  for (const call of message.tool_calls || []) {
    const tool = document.createElement("div");
    tool.className = "tool-call";
    tool.textContent = `tool call: ${call.function.name}(${call.function.arguments})`;
    box.append(tool);
  }
  if (message.role === "assistant") {
    const stats = document.createElement("div");
    stats.className = "stats";
    const figures = document.createElement("span");
    figures.className = "figures";
    figures.textContent = formatStats(message.stats);
    stats.append(figures);
    if (!message.pending) {
      const copy = document.createElement("button");
      copy.type = "button";
      copy.className = "link copy";
      copy.textContent = "copy";
      copy.addEventListener("click", () => copyText(split.answer, copy));
      stats.append(copy);
      if (index === current.messages.length - 1) {
        const again = document.createElement("button");
        again.type = "button";
        again.className = "link regenerate";
        again.textContent = "regenerate";
        again.addEventListener("click", regenerate);
        stats.append(again);
      }
    }
    box.append(stats);
  }
  return box;
}

async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.textContent = "copied";
  setTimeout(() => (button.textContent = "copy"), 1200);
}

function renderMessages() {
  const box = $("messages");
  box.replaceChildren(...current.messages.map(renderMessage));
  box.scrollTop = box.scrollHeight;
}

function renderAll() {
  $("system").value = current.system || "";
  renderConversations();
  renderMessages();
}

// ---- sending: a streamed chat completion, parsed from the fetch body's reader ----

let controller = null;
let modelId = null;

function samplingFields() {
  const fields = {};
  for (const name of SAMPLING_FIELDS) {
    const raw = $(name).value.trim();
    if (raw === "") continue;
    const value = INTEGER_FIELDS.has(name) ? parseInt(raw, 10) : parseFloat(raw);
    if (!Number.isNaN(value)) fields[name] = value;
  }
  return fields;
}

function saveSettings() {
  const values = {};
  for (const name of [...SAMPLING_FIELDS, "tools", "tool_choice", "schema"]) values[name] = $(name).value;
  localStorage.setItem(SETTINGS_STORAGE, JSON.stringify(values));
}

function loadSettings() {
  try {
    const values = JSON.parse(localStorage.getItem(SETTINGS_STORAGE)) || {};
    for (const [name, value] of Object.entries(values)) if ($(name)) $(name).value = value;
  } catch {
    /* nothing kept yet */
  }
}

// Tools and a JSON schema come from textareas; a bad one is shown, not sent.
function advancedFields() {
  const fields = {};
  $("advanced-error").textContent = "";
  const tools = $("tools").value.trim();
  const schema = $("schema").value.trim();
  try {
    if (tools) fields.tools = JSON.parse(tools);
    if (tools && $("tool_choice").value) fields.tool_choice = $("tool_choice").value;
  } catch (error) {
    throw new Error(`tools is not JSON: ${error.message}`);
  }
  try {
    if (schema) fields.response_format = { type: "json_schema", json_schema: { name: "answer", schema: JSON.parse(schema) } };
  } catch (error) {
    throw new Error(`the JSON schema is not JSON: ${error.message}`);
  }
  return fields;
}

function requestMessages() {
  const messages = [];
  if (current.system) messages.push({ role: "system", content: current.system });
  for (const message of current.messages) {
    if (message.error || message.pending) continue;
    const sent = { role: message.role, content: message.content || "" };
    if (message.tool_calls && message.tool_calls.length) sent.tool_calls = message.tool_calls;
    messages.push(sent);
  }
  return messages;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

async function* serverSentEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
      const data = block
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trimStart())
        .join("\n");
      if (data) yield data;
    }
  }
}

function mergeToolCalls(calls, deltas) {
  for (const delta of deltas) {
    const index = delta.index ?? calls.length;
    const call = (calls[index] ||= { id: delta.id, type: "function", function: { name: "", arguments: "" } });
    if (delta.id) call.id = delta.id;
    if (delta.function?.name) call.function.name += delta.function.name;
    if (delta.function?.arguments) call.function.arguments += delta.function.arguments;
  }
}

// The tools and schema fields, or null (the error shown) when one is not JSON.
function checkedAdvancedFields() {
  try {
    return advancedFields();
  } catch (error) {
    $("advanced-error").textContent = error.message;
    $("advanced").open = true;
    return null;
  }
}

async function complete(extra) {
  current.system = $("system").value;
  const body = {
    messages: requestMessages(),
    stream: true,
    stream_options: { include_usage: true },
    ...samplingFields(),
    ...extra,
  };
  if (modelId) body.model = modelId;
  const answer = { role: "assistant", content: "", reasoning: "", tool_calls: [], pending: true, stats: {} };
  current.messages.push(answer);
  renderMessages();
  const box = () => $("messages").lastElementChild;
  controller = new AbortController();
  setBusy(true);
  const started = performance.now();
  let firstToken = null;
  try {
    const response = await api("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const data of serverSentEvents(response)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
      if (chunk.usage) {
        answer.stats.prompt_tokens = chunk.usage.prompt_tokens;
        answer.stats.completion_tokens = chunk.usage.completion_tokens;
      }
      for (const choice of chunk.choices || []) {
        const delta = choice.delta || {};
        const piece = (delta.content || "") + (delta.reasoning_content || delta.reasoning || "");
        if (piece && firstToken === null) firstToken = performance.now();
        answer.content += delta.content || "";
        answer.reasoning += delta.reasoning_content || delta.reasoning || "";
        if (delta.tool_calls) mergeToolCalls(answer.tool_calls, delta.tool_calls);
        if (choice.finish_reason) answer.stats.finish_reason = choice.finish_reason;
      }
      box().replaceWith(renderMessage(answer, current.messages.length - 1));
      $("messages").scrollTop = $("messages").scrollHeight;
    }
  } catch (error) {
    if (error.name === "AbortError") {
      answer.stats.stopped = true;
    } else {
      answer.error = true;
      answer.content += (answer.content ? "\n" : "") + `Error: ${error.message}`;
    }
  } finally {
    const ended = performance.now();
    if (firstToken !== null) {
      answer.stats.ttft_ms = firstToken - started;
      const tokens = answer.stats.completion_tokens;
      if (tokens > 1 && ended > firstToken) answer.stats.tokens_per_s = (tokens - 1) / ((ended - firstToken) / 1000);
    }
    delete answer.pending;
    controller = null;
    setBusy(false);
    saveConversations();
    renderMessages();
  }
}

// ---- an image attached to the next message: read as a data URI, shown under the message box ----

let attachment = null; // { url, name }
let attaching = null; // the FileReader's promise while it reads

function renderAttachment() {
  $("attachment").hidden = !attachment;
  $("attachment-thumb").src = attachment ? attachment.url : "";
  $("attachment-name").textContent = attachment ? attachment.name : "";
}

function clearAttachment() {
  attachment = null;
  $("attach").value = "";
  renderAttachment();
}

function readImage(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.addEventListener("load", () => resolve(reader.result));
    reader.addEventListener("error", () => reject(reader.error || new Error("the file could not be read")));
    reader.readAsDataURL(file);
  });
}

async function attachImage() {
  const file = $("attach").files[0];
  $("attach-error").textContent = "";
  if (!file) return;
  if (!IMAGE_TYPES.has(file.type)) {
    $("attach-error").textContent = `${file.name} is not a PNG, JPEG, GIF or WebP image`;
    clearAttachment();
    return;
  }
  attaching = readImage(file);
  try {
    attachment = { url: await attaching, name: file.name };
  } catch (error) {
    $("attach-error").textContent = `${file.name}: ${error.message}`;
    attachment = null;
  } finally {
    attaching = null;
    $("attach").value = ""; // choosing the same file again attaches it again
    renderAttachment();
  }
}

async function send(event) {
  event.preventDefault();
  if (controller) return;
  if (attaching) await attaching.catch(() => null);
  const text = $("prompt").value.trim();
  if (!text && !attachment) return;
  const extra = checkedAdvancedFields();
  if (!extra) return;
  $("prompt").value = "";
  if (!current.messages.length) current.title = (text || `Image: ${attachment.name}`).slice(0, 40);
  let content = text;
  if (attachment) {
    content = [];
    if (text) content.push({ type: "text", text });
    content.push({ type: "image_url", image_url: { url: attachment.url } });
    clearAttachment();
  }
  current.messages.push({ role: "user", content });
  saveConversations();
  renderConversations();
  await complete(extra);
}

async function regenerate() {
  if (controller) return;
  const extra = checkedAdvancedFields();
  if (!extra) return;
  const last = current.messages[current.messages.length - 1];
  if (last && last.role === "assistant") current.messages.pop();
  await complete(extra);
}

// ---- the server view: /health and /metrics every two seconds, histograms from /ui/metrics ----

function card(label, value, fraction) {
  const box = document.createElement("div");
  box.className = "card";
  const name = document.createElement("div");
  name.className = "label";
  name.textContent = label;
  const figure = document.createElement("div");
  figure.className = "value";
  figure.textContent = value;
  box.append(name, figure);
  if (fraction != null) {
    const bar = document.createElement("div");
    bar.className = "bar";
    const fill = document.createElement("div");
    fill.style.width = `${Math.min(100, Math.max(0, fraction * 100)).toFixed(1)}%`;
    bar.append(fill);
    box.append(bar);
  }
  return box;
}

const show = (value) => (value === null || value === undefined ? "—" : String(value));

function renderServer(health, metrics) {
  const engine = health.engine || {};
  const pages = engine.kv_pages || {};
  const kv = metrics.kv_cache_usage_perc ?? (pages.total ? pages.used / pages.total : null);
  $("server-cards").replaceChildren(
    card("state", `${show(health.state)}${health.ready ? " (ready)" : ""}`),
    card("model", show(health.model)),
    card("context", show(health.ctx)),
    card("decode lanes", show(engine.decode_lanes)),
    card("requests running", show(metrics.requests_running ?? health.queue)),
    card("requests waiting", show(metrics.requests_waiting)),
    card("KV cache", kv == null ? "—" : `${(kv * 100).toFixed(1)}%`, kv),
    card("KV pages", pages.total ? `${pages.used} / ${pages.total}` : "—"),
    card("served", show(metrics.requests_served_total ?? health.served)),
    card("generated tokens", show(metrics.generation_tokens_total)),
  );
}

// Prometheus text: each `<name>_bucket{le="…"} <cumulative count>` line, per histogram.
function parseHistograms(text) {
  const histograms = {};
  for (const line of text.split("\n")) {
    const match = /^pooled_(\w+)_bucket\{le="([^"]+)"\} (\S+)/.exec(line);
    if (!match) continue;
    (histograms[match[1]] ||= []).push({ le: match[2], count: parseFloat(match[3]) });
  }
  return histograms;
}

function drawHistogram(name, buckets) {
  const width = 320;
  const height = 120;
  const counts = buckets.map((bucket, i) => bucket.count - (i ? buckets[i - 1].count : 0));
  const top = Math.max(1, ...counts);
  const step = width / counts.length;
  const svgNs = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNs, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height + 14);
  counts.forEach((count, i) => {
    const bar = document.createElementNS(svgNs, "rect");
    const tall = (count / top) * height;
    bar.setAttribute("x", i * step + 1);
    bar.setAttribute("y", height - tall);
    bar.setAttribute("width", Math.max(1, step - 2));
    bar.setAttribute("height", tall);
    bar.setAttribute("fill", "#2c5282");
    const title = document.createElementNS(svgNs, "title");
    title.textContent = `≤ ${buckets[i].le} s: ${count}`;
    bar.append(title);
    svg.append(bar);
  });
  const axis = document.createElementNS(svgNs, "text");
  axis.setAttribute("x", 0);
  axis.setAttribute("y", height + 12);
  axis.setAttribute("font-size", 10);
  axis.textContent = `buckets ${buckets[0]?.le ?? ""} s … +Inf; total ${buckets[buckets.length - 1]?.count ?? 0}`;
  svg.append(axis);
  const figure = document.createElement("figure");
  const caption = document.createElement("figcaption");
  caption.textContent = name.replaceAll("_", " ");
  figure.append(caption, svg);
  return figure;
}

let refreshing = false;

async function refreshServer() {
  if (refreshing || $("view-server").hidden) return;
  refreshing = true;
  try {
    const [health, metrics] = await Promise.all([
      api("/health").then((r) => r.json()),
      api("/metrics").then((r) => (r.ok ? r.json() : {})),
    ]);
    renderServer(health, metrics);
    const prometheus = await api("/ui/metrics");
    if (prometheus.ok) {
      const histograms = parseHistograms(await prometheus.text());
      $("histograms").replaceChildren(...Object.entries(histograms).map(([name, b]) => drawHistogram(name, b)));
    }
  } catch (error) {
    $("server-cards").replaceChildren(card("error", error.message));
  } finally {
    refreshing = false;
  }
}

function showView(view) {
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.view === view);
  for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== `view-${view}`;
  if (view === "server") refreshServer();
}

async function loadModel() {
  try {
    const response = await api("/v1/models");
    if (!response.ok) return;
    const models = await response.json();
    const served = (models.data || []).find((m) => m.kind === undefined || m.kind === "chat") || models.data?.[0];
    if (served) {
      modelId = served.id;
      $("model-name").textContent = served.id;
    }
  } catch {
    /* the chat still works without a model name */
  }
}

// ---- wiring ----

function start() {
  loadSettings();
  current = conversations[0] || null;
  if (!current) newConversation();
  else renderAll();
  $("composer").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) send(event);
  });
  $("stop").addEventListener("click", () => controller && controller.abort());
  $("attach").addEventListener("change", attachImage);
  $("attachment-remove").addEventListener("click", clearAttachment);
  $("new-chat").addEventListener("click", () => controller || newConversation());
  $("system").addEventListener("change", () => {
    current.system = $("system").value;
    saveConversations();
  });
  for (const name of [...SAMPLING_FIELDS, "tools", "tool_choice", "schema"]) $(name).addEventListener("change", saveSettings);
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showView(tab.dataset.view));
  setInterval(refreshServer, REFRESH_MS);
  loadModel();
}

start();
