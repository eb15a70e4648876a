// The Logs page: follow a device's log live (server-sent events) and
// pause. Progressive enhancement only: without JavaScript the form reads
// the last lines. Lines are inserted as text, never as HTML.
(function () {
  "use strict";
  var list = document.getElementById("logs-lines");
  var follow = document.getElementById("logs-follow");
  var pause = document.getElementById("logs-pause");
  var status = document.getElementById("logs-status");
  if (!list || !follow || !pause || !window.EventSource) { return; }
  var url = list.getAttribute("data-stream");
  if (!url) { return; }
  var es = null, count = 0, max = 2000;
  function say(text) { status.textContent = text; }
  function add(line) {
    var li = document.createElement("li");
    var t = document.createElement("time");
    t.textContent = line.t;
    var c = document.createElement("code");
    c.textContent = line.l;
    li.appendChild(t);
    li.appendChild(document.createTextNode(" "));
    li.appendChild(c);
    list.appendChild(li);
    count++;
    while (list.children.length > max) { list.removeChild(list.firstChild); }
  }
  function stop(text) {
    if (es) { es.close(); es = null; }
    follow.hidden = false;
    pause.hidden = true;
    say(text);
  }
  follow.hidden = false;
  follow.addEventListener("click", function () {
    list.textContent = "";
    count = 0;
    es = new EventSource(url);
    follow.hidden = true;
    pause.hidden = false;
    pause.focus();
    say("Following the log…");
    es.addEventListener("line", function (e) { add(JSON.parse(e.data)); });
    es.addEventListener("end", function (e) { stop(JSON.parse(e.data) + " (" + count + " lines)."); });
    es.addEventListener("problem", function (e) { stop(JSON.parse(e.data)); });
    es.onerror = function () { stop("The stream closed (" + count + " lines)."); };
  });
  pause.addEventListener("click", function () { stop("Paused after " + count + " lines; the device was asked to stop."); follow.focus(); });
})();
