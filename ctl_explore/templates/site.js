// Draws the page's plotly figures with the local plotly.js, starts its explorables (assets/explorables.js) and tells
// when figures, explorables and math are done (window.ctlSite.done: the browser test waits for it).
(function () {
  var mathResolve, mathDone = new Promise(function (r) { mathResolve = r; });
  var site = window.ctlSite = {done: false, errors: [], mathDone: function () { mathResolve(); }};
  // A figure fits the screen: no wider than its column; on the figure page (a slide), as tall as the screen allows
  // (at least 80 % of it); on a touch screen no drag-zoom, so that a swipe over a plot scrolls the page.
  var touch = !!(window.matchMedia && window.matchMedia("(pointer: coarse)").matches);
  function fit(layout, div) {
    var room = div.clientWidth || document.body.clientWidth;
    if (layout.width && layout.width > room) { delete layout.width; layout.autosize = true; }
    var slide = div.closest && div.closest("section.ctl-slide");
    if (slide) {
      var head = slide.querySelector("h2"), used = head ? head.getBoundingClientRect().height + 24 : 40;
      layout.height = Math.max(320, Math.round(window.innerHeight - used - 16));
      delete layout.width; layout.autosize = true;
    }
    if (touch) {
      layout.dragmode = false;
      Object.keys(layout).forEach(function (k) { if (/^[xy]axis\d*$|^scene$/.test(k)) layout[k].fixedrange = true; });
      ["xaxis", "yaxis"].forEach(function (k) { layout[k] = layout[k] || {}; layout[k].fixedrange = true; });
    }
    return layout;
  }
  document.addEventListener("DOMContentLoaded", function () {
    if (!window.MathJax) mathResolve();
    var plots = Array.prototype.map.call(document.querySelectorAll("div.ctl-plotly"), function (div) {
      var fig = JSON.parse(div.querySelector("script").textContent);
      var target = document.createElement("div");
      div.appendChild(target);
      var layout = fit(fig.layout || {}, div);
      var config = Object.assign({responsive: true, displaylogo: false}, fig.config || {}, {scrollZoom: false},
                                 touch ? {displayModeBar: false} : {});  // on a touch screen plotly's toolbar would cover the title
      return Plotly.newPlot(target, fig.data || [], layout, config);
    });
    var live = Promise.resolve().then(function () { return window.ctlExplorables && window.ctlExplorables.init(); });
    Promise.all([Promise.all(plots), mathDone, live]).then(function () { site.done = true; },
      function (e) { site.errors.push(String(e)); console.error("figure not drawn: " + e); });
  });
})();
