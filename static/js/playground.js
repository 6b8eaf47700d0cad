// The chat playground on a revision's page (templates/deployments/_playground.html).
// Each message is POSTed with the conversation so far (kept in this page only) and the answer
// streams back as Server-Sent Events from the panel (deployments/views/playground.py), read with
// fetch and a ReadableStream: `start`, `delta` {content, reasoning}, then `done` {ttft_ms,
// tokens, tokens_per_s, finish_reason} or `error` {message}. Stop aborts the request; the panel
// then closes the engine's. A static file, as the Content-Security-Policy allows no inline script.
(function () {
  "use strict";
  var form = document.getElementById("playground-form");
  if (!form) { return; }
  var log = document.getElementById("playground-log");
  var prompt = form.querySelector("textarea[name=prompt]");
  var send = form.querySelector(".playground-send");
  var stop = form.querySelector(".playground-stop");
  var fresh = form.querySelector(".playground-new");
  var stats = form.querySelector(".playground-stats");
  var history = [];
  var controller = null;

  function turn(role, text) {
    var empty = log.querySelector(".playground-empty");
    if (empty) { empty.remove(); }
    var box = document.createElement("div");
    box.className = "turn " + role;
    var who = document.createElement("strong");
    who.textContent = role === "user" ? "You" : "Model";
    var body = document.createElement("div");
    body.className = "turn-text";
    body.textContent = text;
    box.appendChild(who);
    box.appendChild(body);
    log.appendChild(box);
    log.scrollTop = log.scrollHeight;
    return box;
  }

  function busy(on) {
    send.disabled = on;
    fresh.disabled = on;
    stop.disabled = !on;
    prompt.readOnly = on;
  }

  function number(value, digits, unit) {
    return typeof value === "number" ? value.toFixed(digits) + unit : "–";
  }

  function summary(done) {
    var parts = ["time to first token " + number(done.ttft_ms, 0, " ms"),
                 number(done.tokens_per_s, 1, " tokens/s"),
                 (done.tokens || 0) + " tokens"];
    if (done.finish_reason === "length") { parts.push("cut at max tokens"); }
    else if (done.finish_reason && done.finish_reason !== "stop") { parts.push(done.finish_reason); }
    return parts.join(" · ");
  }

  // Read one block of "event: NAME" / "data: JSON" lines.
  function parse(block) {
    var name = "message", data = "";
    block.split("\n").forEach(function (line) {
      if (line.indexOf("event:") === 0) { name = line.slice(6).trim(); }
      else if (line.indexOf("data:") === 0) { data += line.slice(5).trim(); }
    });
    var value = {};
    try { value = data ? JSON.parse(data) : {}; } catch (e) { value = {}; }
    return { name: name, data: value };
  }

  // Why a request got no stream: the panel's own words where it gave them.
  function refusal(response) {
    if (response.redirected && response.url.indexOf("/accounts/login/") >= 0) {
      return Promise.resolve("Your session has ended: sign in again (reload the page).");
    }
    var type = response.headers.get("Content-Type") || "";
    if (type.indexOf("application/json") === 0) {
      return response.json().then(function (body) { return body.error || ("The panel answered HTTP " + response.status + "."); },
                                  function () { return "The panel answered HTTP " + response.status + "."; });
    }
    if (response.status === 403) { return Promise.resolve("Sending messages needs the operator role."); }
    return Promise.resolve("The panel answered HTTP " + response.status + ".");
  }

  function ask(event) {
    event.preventDefault();
    if (controller) { return; }
    var text = prompt.value;
    if (!text.trim()) { prompt.focus(); return; }
    var data = new FormData(form);
    data.set("history", JSON.stringify(history));
    turn("user", text);
    var answerBox = turn("assistant", "");
    answerBox.classList.add("pending");
    var answer = answerBox.querySelector(".turn-text");
    var thinking = null;
    var reply = "", failure = null, done = null, stopped = false;
    prompt.value = "";
    controller = new AbortController();
    busy(true);
    stats.textContent = "Waiting for the first token…";

    function handle(ev) {
      if (ev.name === "delta") {
        if (ev.data.reasoning) {
          if (!thinking) {
            thinking = document.createElement("div");
            thinking.className = "turn-reasoning sub";
            answerBox.insertBefore(thinking, answer);
          }
          thinking.textContent += ev.data.reasoning;
        }
        if (ev.data.content) {
          reply += ev.data.content;
          answer.textContent = reply;
          stats.textContent = "Answering…";
        }
        log.scrollTop = log.scrollHeight;
      } else if (ev.name === "done") {
        done = ev.data;
      } else if (ev.name === "error") {
        failure = ev.data.message || "The engine stopped with an error.";
      }
    }

    fetch(form.action, {
      method: "POST",
      body: data,
      credentials: "same-origin",
      headers: { "Accept": "text/event-stream" },
      signal: controller.signal
    }).then(function (response) {
      var type = response.headers.get("Content-Type") || "";
      if (!response.ok || type.indexOf("text/event-stream") !== 0) {
        return refusal(response).then(function (message) { failure = message; });
      }
      var reader = response.body.getReader();
      var decoder = new TextDecoder();
      var buffer = "";
      function pump() {
        return reader.read().then(function (chunk) {
          if (chunk.done) { return; }
          buffer += decoder.decode(chunk.value, { stream: true });
          var blocks = buffer.split("\n\n");
          buffer = blocks.pop();
          blocks.forEach(function (block) { if (block.trim()) { handle(parse(block)); } });
          return pump();
        });
      }
      return pump();
    }).catch(function (err) {
      if (err && err.name === "AbortError") { stopped = true; }
      else { failure = "The connection to the panel failed: " + (err && err.message ? err.message : err); }
    }).then(function () {
      controller = null;
      busy(false);
      answerBox.classList.remove("pending");
      if (!failure && !done && !stopped) { failure = "The answer was cut off: the connection to the panel closed."; }
      if (failure || (stopped && !reply)) {
        // Nothing of this exchange joins the history; the message goes back into the box.
        answerBox.classList.add("error");
        answer.textContent = (reply ? reply + "\n\n" : "") + (failure || "Stopped before the first token.");
        stats.textContent = "";
        prompt.value = text;
      } else {
        history.push({ role: "user", content: text });
        history.push({ role: "assistant", content: reply });
        if (stopped) {
          answerBox.classList.add("stopped");
          stats.textContent = "Stopped.";
        } else {
          stats.textContent = summary(done);
        }
      }
      prompt.focus();
    });
  }

  form.addEventListener("submit", ask);
  stop.addEventListener("click", function () { if (controller) { controller.abort(); } });
  fresh.addEventListener("click", function () {
    if (controller) { return; }
    history = [];
    log.textContent = "";
    stats.textContent = "";
    prompt.focus();
  });
  prompt.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
})();
