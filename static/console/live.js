// Live refresh of a list or a turn's page (htmx polls each [data-live] region; a turn's poll also redraws the
// parts marked [data-live-with=<region>]). A poll is skipped while the person has paused it, is typing or
// deciding inside the region or one of its parts, or is on another tab: a refresh must never throw away a
// reason half written.
(function () {
  "use strict";
  function inUse(part) {
    var active = document.activeElement;
    if (active && active !== part && part.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) {
      return true;
    }
    // A fold the person opened (not one the page draws open) pauses the poll, which would close it.
    return part.querySelector("details[open]:not([data-drawn-open])") !== null;
  }
  function busy(region) {
    var parts = document.querySelectorAll('[data-live-with="' + region.id + '"]');
    return inUse(region) || Array.prototype.some.call(parts, inUse);
  }
  document.addEventListener("htmx:beforeRequest", function (evt) {
    var region = evt.detail.elt;
    if (!region || !region.hasAttribute || !region.hasAttribute("data-live")) { return; }
    if (region.getAttribute("data-paused") === "1" || document.hidden || busy(region)) { evt.preventDefault(); }
  });
  var buttons = document.querySelectorAll("[data-live-toggle]");
  Array.prototype.forEach.call(buttons, function (button) {
    var region = document.getElementById(button.getAttribute("aria-controls"));
    if (!region) { return; }
    button.hidden = false;
    button.addEventListener("click", function () {
      var paused = region.getAttribute("data-paused") !== "1";
      region.setAttribute("data-paused", paused ? "1" : "0");
      button.setAttribute("aria-pressed", paused ? "false" : "true");
      button.querySelector("span.live-word").textContent = paused ? "paused" : "on";
    });
  });
}());
