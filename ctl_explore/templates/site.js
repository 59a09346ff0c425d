// Draws the page's plotly figures with the local plotly.js, starts its explorables (assets/explorables.js) and tells
// when figures, explorables and math are done (window.ctlSite.done: the browser test waits for it).
(function () {
  var mathResolve, mathDone = new Promise(function (r) { mathResolve = r; });
  var site = window.ctlSite = {done: false, errors: [], mathDone: function () { mathResolve(); }};
  document.addEventListener("DOMContentLoaded", function () {
    if (!window.MathJax) mathResolve();
    var plots = Array.prototype.map.call(document.querySelectorAll("div.ctl-plotly"), function (div) {
      var fig = JSON.parse(div.querySelector("script").textContent);
      var target = document.createElement("div");
      div.appendChild(target);
      var config = Object.assign({responsive: true, displaylogo: false}, fig.config || {});
      return Plotly.newPlot(target, fig.data || [], fig.layout || {}, config);
    });
    var live = Promise.resolve().then(function () { return window.ctlExplorables && window.ctlExplorables.init(); });
    Promise.all([Promise.all(plots), mathDone, live]).then(function () { site.done = true; },
      function (e) { site.errors.push(String(e)); console.error("figure not drawn: " + e); });
  });
})();
