#include "server/chat_page.h"

namespace zen::server {
namespace {

// One document: styles and script inline, nothing fetched from elsewhere. Talks to this
// server's /v1/chat/completions with stream=true and renders the SSE deltas as they come.
constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>zen chat</title>
<style>
  :root { --bg: #f6f7f9; --panel: #fff; --ink: #1d2330; --muted: #6b7385; --accent: #2f6fed; --line: #e2e5ec; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; background: var(--bg); color: var(--ink);
         display: flex; flex-direction: column; height: 100vh; }
  header { display: flex; gap: 12px; align-items: center; padding: 10px 16px; background: var(--panel);
           border-bottom: 1px solid var(--line); flex-wrap: wrap; }
  header h1 { font-size: 17px; margin: 0 8px 0 0; }
  header label { color: var(--muted); font-size: 13px; display: flex; gap: 4px; align-items: center; }
  header input[type=number] { width: 70px; }
  header input[type=password] { width: 120px; }
  #model { font-weight: 600; }
  #log { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 12px; }
  .msg { max-width: 860px; width: 100%; margin: 0 auto; padding: 10px 14px; border-radius: 10px; background: var(--panel);
         border: 1px solid var(--line); white-space: pre-wrap; word-wrap: break-word; }
  .msg.user { background: #e8f0fe; border-color: #cfdcf8; }
  .msg .role { font-size: 12px; color: var(--muted); margin-bottom: 4px; }
  .msg details { margin-bottom: 6px; color: var(--muted); }
  .msg details summary { cursor: pointer; font-size: 13px; }
  .msg .reasoning { white-space: pre-wrap; font-size: 13px; border-left: 3px solid var(--line); padding-left: 8px; }
  .msg .tool { font: 13px/1.4 ui-monospace, monospace; background: #f1f3f7; border-radius: 6px; padding: 6px 8px; margin-top: 6px; }
  .msg .error { color: #b3261e; }
  #stats { font-size: 12px; color: var(--muted); text-align: center; min-height: 18px; }
  form { display: flex; gap: 8px; padding: 12px 16px; background: var(--panel); border-top: 1px solid var(--line); }
  textarea { flex: 1; resize: none; height: 64px; font: inherit; padding: 8px; border: 1px solid var(--line); border-radius: 8px; }
  button { padding: 0 18px; border: 0; border-radius: 8px; background: var(--accent); color: #fff; font: inherit; cursor: pointer; }
  button:disabled { opacity: .5; cursor: default; }
  button.secondary { background: #8a93a6; }
</style>
</head>
<body>
<header>
  <h1>zen chat</h1>
  <span id="model">…</span>
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>max tokens <input id="max_tokens" type="number" min="1" value="512"></label>
  <label><input id="thinking" type="checkbox" checked> thinking</label>
  <label>API key <input id="api_key" type="password" placeholder="(none)"></label>
  <button id="clear" class="secondary" type="button">New chat</button>
</header>
<div id="log"></div>
<div id="stats"></div>
<form id="form">
  <textarea id="input" placeholder="Message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" class="secondary" disabled>Stop</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const chatLog = [];
let controller = null;
let modelName = "";

$("api_key").value = localStorage.getItem("zen_api_key") || "";
$("api_key").addEventListener("change", () => { localStorage.setItem("zen_api_key", $("api_key").value); loadModel(); });

function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("api_key").value) h["Authorization"] = "Bearer " + $("api_key").value;
  return h;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const j = await r.json();
    if (!r.ok) throw new Error(j.error ? j.error.message : r.statusText);
    modelName = j.data[0].id;
    $("model").textContent = modelName;
  } catch (e) {
    $("model").textContent = "(" + e.message + ")";
  }
}

function addMessage(role) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const label = document.createElement("div");
  label.className = "role";
  label.textContent = role;
  div.appendChild(label);
  const details = document.createElement("details");
  details.hidden = true;
  details.innerHTML = "<summary>Reasoning</summary><div class='reasoning'></div>";
  div.appendChild(details);
  const body = document.createElement("div");
  body.className = "content";
  div.appendChild(body);
  const tools = document.createElement("div");
  div.appendChild(tools);
  $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return { div, details, reasoning: details.querySelector(".reasoning"), body, tools };
}

function showStats(tokens, started, firstAt, done) {
  const now = performance.now();
  const gen = firstAt ? (now - firstAt) / 1000 : 0;
  const rate = gen > 0 && tokens > 1 ? ((tokens - 1) / gen).toFixed(1) : "–";
  const ttft = firstAt ? ((firstAt - started) / 1000).toFixed(2) + " s" : "–";
  $("stats").textContent = `${tokens} tokens · ${rate} tokens/s · first token ${ttft}` + (done ? "" : " · generating…");
}

async function send(text) {
  chatLog.push({ role: "user", content: text });
  addMessage("user").body.textContent = text;
  const view = addMessage("assistant");
  const body = {
    model: modelName || undefined, messages: chatLog, stream: true, stream_options: { include_usage: true },
    temperature: Number($("temperature").value), max_tokens: Number($("max_tokens").value),
    chat_template_kwargs: { enable_thinking: $("thinking").checked },
  };
  controller = new AbortController();
  $("send").disabled = true; $("stop").disabled = false;
  const started = performance.now();
  let firstAt = 0, tokens = 0, content = "", reasoning = "";
  const calls = [];
  try {
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal });
    if (!r.ok) {
      const j = await r.json().catch(() => ({}));
      throw new Error(j.error ? j.error.message : r.status + " " + r.statusText);
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;  // ": keep-alive" comments
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (chunk.error) throw new Error(chunk.error.message);
          if (chunk.usage) tokens = chunk.usage.completion_tokens;
          for (const choice of chunk.choices || []) {
            const d = choice.delta || {};
            if (d.content || d.reasoning_content || d.tool_calls) {
              if (!firstAt) firstAt = performance.now();
              if (!chunk.usage) tokens += 1;
            }
            if (d.reasoning_content) {
              reasoning += d.reasoning_content;
              view.details.hidden = false;
              view.reasoning.textContent = reasoning;
            }
            if (d.content) { content += d.content; view.body.textContent = content; }
            for (const tc of d.tool_calls || []) {
              if (!calls[tc.index]) {
                calls[tc.index] = { id: tc.id, type: "function", function: { name: tc.function.name || "", arguments: "" }, el: document.createElement("div") };
                calls[tc.index].el.className = "tool";
                view.tools.appendChild(calls[tc.index].el);
              }
              calls[tc.index].function.arguments += tc.function.arguments || "";
              calls[tc.index].el.textContent = "tool call: " + calls[tc.index].function.name + "(" + calls[tc.index].function.arguments + ")";
            }
          }
          showStats(tokens, started, firstAt, false);
          $("log").scrollTop = $("log").scrollHeight;
        }
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") {
      const err = document.createElement("div");
      err.className = "error";
      err.textContent = "error: " + e.message;
      view.div.appendChild(err);
    }
  } finally {
    controller = null;
    $("send").disabled = false; $("stop").disabled = true;
    showStats(tokens, started, firstAt, true);
  }
  const message = { role: "assistant", content };
  if (calls.length) message.tool_calls = calls.map(({ el, ...c }) => c);
  chatLog.push(message);
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("clear").addEventListener("click", () => { chatLog.length = 0; $("log").innerHTML = ""; $("stats").textContent = ""; });
loadModel();
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view chat_page_html() { return kPage; }

}  // namespace zen::server
