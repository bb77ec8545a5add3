// Offer the browser's own time zone on the preferences page (the choice is still the operator's).
(function () {
  "use strict";
  var zone;
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone; } catch (e) { return; }
  var select = document.getElementById("id_zone");
  var note = document.getElementById("browser-zone");
  if (!zone || !select || !note) { return; }
  note.querySelector("strong").textContent = zone;
  note.hidden = false;
  document.getElementById("use-browser-zone").addEventListener("click", function () { select.value = zone; select.focus(); });
}());
