// The site's explorables, drawn with the local plotly.js and no kernel: the temperature explorer computed in the
// page from the definitions of lessons 00-02, and the hypersphere playground replayed from runs the library made
// when the page was built. window.ctlExplorables.init() draws every <div class="ctl-explorable"> of the page.
(function () {
  "use strict";
  var M = {};  // a port of ctl_explore's functions for one anchor; float64, as the library computes them

  // torch.linspace(-1, 1, k) in float64, bit for bit: torch computes each point with one fused multiply-add, from the
  // nearer end, start + step·i for the first half and end − step·(k − 1 − i) for the rest. JavaScript has no fused
  // multiply-add, so fma(a, b, c) is the exact product (Dekker's split) plus c, summed with its rounding error.
  function twoSum(a, b) { var s = a + b, bb = s - a; return [s, (a - (s - bb)) + (b - bb)]; }
  function split(a) { var c = 134217729 * a, hi = c - (c - a); return [hi, a - hi]; }
  M.fma = function (a, b, c) {
    var p = a * b, A = split(a), B = split(b), e = ((A[0] * B[0] - p) + A[0] * B[1] + A[1] * B[0]) + A[1] * B[1];
    var s = twoSum(p, c); return s[0] + (s[1] + e);
  };
  M.linspace = function (k) {
    var out = new Array(k), step = 2 / (k - 1), half = Math.floor(k / 2);
    for (var i = 0; i < k; i++) out[i] = i < half ? M.fma(step, i, -1) : M.fma(-step, k - 1 - i, 1);
    return out;
  };
  M.nInformative = function (k, alpha) {  // n_informative: ⌈αK⌉, float noise rounded away, in [1, K]
    return Math.max(1, Math.min(k, Math.ceil(Number((alpha * k).toFixed(9)))));
  };
  M.sAlpha = function (neg, alpha) { return neg[neg.length - M.nInformative(neg.length, alpha)]; };  // neg ascending
  function scaled(neg, tau, alpha) {  // _penalty_logits: s/τ, and -∞ below s_α when alpha is given
    var cut = alpha == null ? -Infinity : M.sAlpha(neg, alpha), out = new Array(neg.length);
    for (var i = 0; i < neg.length; i++) out[i] = neg[i] >= cut ? neg[i] / tau : -Infinity;
    return out;
  }
  function logNorm(x) {  // log_softmax(x)[i] = (x[i] - m) - logS, as torch computes it (m the maximum)
    var m = -Infinity, s = 0, i;
    for (i = 0; i < x.length; i++) if (x[i] > m) m = x[i];
    for (i = 0; i < x.length; i++) s += Math.exp(x[i] - m);
    return {m: m, logS: Math.log(s)};
  }
  M.relativePenalty = function (neg, tau, alpha) {  // Eq 5 (Eq 8 with alpha): softmax(s/τ) over the kept negatives
    var x = scaled(neg, tau, alpha), m = -Infinity, s = 0, i, out = new Array(x.length);
    for (i = 0; i < x.length; i++) if (x[i] > m) m = x[i];
    for (i = 0; i < x.length; i++) { out[i] = Math.exp(x[i] - m); s += out[i]; }
    for (i = 0; i < x.length; i++) out[i] /= s;
    return out;
  };
  M.penaltyEntropy = function (neg, tau, alpha) {  // H(r_i) in nats, 0·log 0 = 0
    var x = scaled(neg, tau, alpha), n = logNorm(x), h = 0;
    for (var i = 0; i < x.length; i++) { var lr = (x[i] - n.m) - n.logS, r = Math.exp(lr); if (r > 0) h -= r * lr; }
    return h;
  };
  M.entropyCurve = function (neg, taus, alpha) {  // penaltyEntropy at every τ, the same operations without its copies
    var cut = alpha == null ? -Infinity : M.sAlpha(neg, alpha), k = neg.length;
    return taus.map(function (t) {
      var m = -Infinity, s = 0, h = 0, j, x, lr, r;
      for (j = 0; j < k; j++) if (neg[j] >= cut) { x = neg[j] / t; if (x > m) m = x; }
      for (j = 0; j < k; j++) if (neg[j] >= cut) s += Math.exp(neg[j] / t - m);
      var logS = Math.log(s);
      for (j = 0; j < k; j++) if (neg[j] >= cut) { lr = (neg[j] / t - m) - logS; r = Math.exp(lr); if (r > 0) h -= r * lr; }
      return h;
    });
  };
  M.contrastiveLoss = function (pos, neg, tau, alpha) {  // Eq 1 (Eq 9 with alpha): -log softmax([s_ii, s_ij]/τ)[0]
    var x = scaled(neg, tau, alpha); x.unshift(pos / tau);
    var n = logNorm(x);
    return n.logS - (x[0] - n.m);
  };
  M.simpleLoss = function (pos, neg, lam) { var s = 0; for (var i = 0; i < neg.length; i++) s += neg[i]; return lam * s - pos; };
  M.lossCurves = function (pos, neg, taus) {  // loss_curves: Eq 1, Eq 6 (τ→0) and Eq 7 (τ→∞) at every τ
    var k = neg.length, top = neg[k - 1], out = {loss: [], triplet: [], simple: []};
    taus.forEach(function (t) {  // the same operations as contrastiveLoss, without its copies of the K negatives
      var p = pos / t, m = p, s = 0, sn = 0, j, x;
      for (j = 0; j < k; j++) { x = neg[j] / t; if (x > m) m = x; }
      s = Math.exp(p - m);
      for (j = 0; j < k; j++) { x = neg[j] / t; s += Math.exp(x - m); sn += x; }
      out.loss.push(Math.log(s) - (p - m));
      out.triplet.push(Math.max(top / t - p, 0));
      out.simple.push(Math.log(k + 1) - (k * p - sn) / (k + 1));
    });
    return out;
  };
  M.limitRegimes = function (curves, taus, rtol) {  // limit_regimes: (τ0, τ∞) or null
    rtol = rtol == null ? 0.05 : rtol;
    var T = taus.length, close = function (name, i) { return Math.abs(curves[name][i] - curves.loss[i]) <= rtol * curves.loss[i]; };
    var nTrip = 0, nSimple = 0;
    while (nTrip < T && close("triplet", nTrip)) nTrip++;
    while (nSimple < T && close("simple", T - 1 - nSimple)) nSimple++;
    return [nTrip ? taus[nTrip - 1] : null, nSimple ? taus[T - nSimple] : null];
  };
  M.lossGradients = function (pos, neg, tau) {  // Eq 4: ∂L/∂s_ii and ∂L/∂s_ij
    var x = neg.map(function (s) { return s / tau; }); x.unshift(pos / tau);
    var m = Math.max.apply(null, [x[0], x[x.length - 1]]), s = 0, i, e = new Array(x.length);
    for (i = 0; i < x.length; i++) if (x[i] > m) m = x[i];
    for (i = 0; i < x.length; i++) { e[i] = Math.exp(x[i] - m); s += e[i]; }
    var dneg = new Array(neg.length), dpos = 0;
    for (i = 0; i < neg.length; i++) { dneg[i] = e[i + 1] / s / tau; dpos -= dneg[i]; }
    return {pos: dpos, neg: dneg};
  };
  M.histc = function (x, bins, lo, hi) {  // torch.histc on the CPU: a value's bin by one division, the last bin closed
    var out = new Array(bins).fill(0);
    for (var i = 0; i < x.length; i++) {
      var v = x[i];
      if (!(v >= lo && v <= hi)) continue;
      out[Math.min(bins - 1, Math.trunc((v - lo) * bins / (hi - lo)))] += 1;
    }
    return out;
  };

  function copy(o) { return JSON.parse(JSON.stringify(o)); }
  function fmt(x, digits) { return Number(x).toPrecision(digits).replace(/(\.\d*?)0+(e|$)/, "$1$2").replace(/\.(e|$)/, "$1"); }
  function pct(x) { return (100 * x).toFixed(1) + "%"; }
  function el(tag, attrs, parent, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text != null) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  // A figure for the page: no fixed width (it fills its column), no kept zoom (its axes rescale on every redraw), and
  // on a touch screen no drag-zoom, so that a swipe over a plot scrolls the page.
  var TOUCH = !!(window.matchMedia && window.matchMedia("(pointer: coarse)").matches);
  var CONFIG = {displaylogo: false, responsive: true, scrollZoom: false};
  // On a touch screen plotly's toolbar would sit over every title (it shows on a tap): none there. The 3-D sphere is
  // drawn as a still picture on a touch screen, so that a finger over it scrolls the page (scrubbing and ▶ play move it).
  if (TOUCH) CONFIG.displayModeBar = false;
  var STILL = Object.assign({}, CONFIG, {staticPlot: TOUCH});
  function fitScreen(layout) {
    delete layout.width; delete layout.uirevision; layout.autosize = true;
    if (TOUCH) {
      layout.dragmode = false;
      Object.keys(layout).forEach(function (k) { if (/^[xy]axis\d*$|^scene$/.test(k)) layout[k].fixedrange = true; });
    }
    return layout;
  }
  function figure(spec, name) {
    var f = copy(spec.figures[name]); f.layout.template = spec.template; fitScreen(f.layout);
    f.pristine = copy(f.layout);  // the ranges the library set; every other axis autoscales
    return f;
  }
  // Before a redraw: every axis back to the library's range or to autoscale (undoing any zoom), then the ranges
  // this update computed.
  function fitAxes(f, ranges) {
    Object.keys(f.layout).forEach(function (k) {
      if (!/^[xy]axis\d*$/.test(k)) return;
      var p = f.pristine[k] || {};
      if (ranges && ranges[k]) { f.layout[k].range = ranges[k].slice(); f.layout[k].autorange = false; }
      else if (p.range) { f.layout[k].range = p.range.slice(); f.layout[k].autorange = false; }
      else { delete f.layout[k].range; f.layout[k].autorange = true; }
    });
  }
  // ---- drawing a change without plotly: the SVG of the traces, shapes and label that τ, α or λ move ------------
  // A plotly redraw of one figure costs 9-17 ms on a shared 2-core machine, whatever changed; four of them do not fit
  // in a frame (16 ms). When a change moves only some traces' points (and the s_α band and its label) on axes whose
  // ranges stay, the pixels plotly would draw follow from the axes' own mapping (c2p, the function plotly draws with),
  // so those few SVG attributes are written here directly: well under a millisecond for a figure. Plotly's own copy
  // of the data (for hover) is brought in step by a redraw once the controls rest (TemperatureExplorer.sync).
  function axisOf(fl, id) { return fl[id.charAt(0) + "axis" + id.slice(1)]; }
  function traceGroups(div) {  // trace index -> its <g class="trace"> in the plot's SVG
    var out = {};
    div.querySelectorAll("g.trace").forEach(function (g) {
      var cd = g.__data__, t = cd && cd[0] && cd[0].trace;
      if (t && t.index != null && !out[t.index]) out[t.index] = g;
    });
    return out;
  }
  // A lines trace: plotly's path with every point (the explorer's traces have line.simplify off, so plotly keeps
  // every point too), "M" + [x, y] pairs joined with "L".
  function linePath(g, t, xa, ya) {
    var path = g.querySelector("path.js-line");
    if (!path || !t.x || t.x.length !== t.y.length || t.x.length < 2) return false;
    var pts = new Array(t.x.length);
    for (var i = 0; i < t.x.length; i++) {
      var px = xa.c2p(t.x[i]), py = ya.c2p(t.y[i]);
      if (!isFinite(px) || !isFinite(py)) return false;
      pts[i] = px + "," + py;
    }
    path.setAttribute("d", "M" + pts.join("L"));
    return true;
  }
  function markerPoint(g, t, xa, ya) {  // a one-point markers trace: the marker's translate
    var pt = g.querySelectorAll("path.point");
    if (pt.length !== 1 || t.x.length !== 1) return false;
    var px = xa.c2p(t.x[0]), py = ya.c2p(t.y[0]);
    if (!isFinite(px) || !isFinite(py)) return false;
    pt[0].setAttribute("transform", "translate(" + px + "," + py + ")");
    return true;
  }
  // Stacked vertical bars, one per trace: plotly's geometry for each (bar/plot.js) from the bar's base s0 and top s1,
  // with its rounding (values to whole pixels only when the bars have no gap between them).
  function stackedBars(div, groups) {
    var fl = div._fullLayout, ya = fl.yaxis, xa = fl.xaxis, base = {}, n = div.data.length;
    var nogap = fl.bargap === 0 && fl.bargroupgap === 0;
    for (var i = 0; i < n; i++) {
      var t = div.data[i], full = div._fullData[i], g = groups[i], path = g && g.querySelector("g.point path");
      var pt = path && path.parentNode.__data__;
      if (!path || !pt || !full || t.y.length !== 1 || !(t.y[0] >= 0)) return false;
      var lw = (full.marker && full.marker.line && full.marker.line.width) || 0;
      var round2 = function (v) { return Math.round(v * 100) / 100; }, pe = round2(lw / 2 % 1);
      var Y = function (v) { return nogap ? round2(Math.round(v) - pe) : v; };
      var K = function (v, other, along) { return along && v === other ? v : Math.abs(v - other) >= 2 ? Y(v) : v > other ? Math.ceil(v) : Math.floor(v); };
      var q = lw > 0.01 || (full.opacity != null && full.opacity < 1) || /rgba|hsla|transparent/.test(String(full.marker.color)) ? Y : K;
      var key = String(t.x[0]), s0 = base[key] || 0, s1 = s0 + t.y[0];
      base[key] = s1;
      var x0 = xa.c2p(pt.p0, true), x1 = xa.c2p(pt.p1, true), y0 = ya.c2p(s0, true), y1 = ya.c2p(s1, true);
      if (!(isFinite(x0) && isFinite(x1) && isFinite(y0) && isFinite(y1))) return false;
      if (!div._context.staticPlot) { x0 = q(x0, x1, false); x1 = q(x1, x0, false); y0 = q(y0, y1, true); y1 = q(y1, y0, true); }  // in plotly's order
      path.setAttribute("d", "M" + x0 + "," + y0 + "V" + y1 + "H" + x1 + "V" + y0 + "Z");
    }
    return true;
  }
  // The s_α band (a rect from x0 to x1, in the SVG's own pixels) and its label, moved to the new s_α: the label by
  // as many pixels as its anchor moved, as plotly places it (centre, then its box's corner rounded to whole pixels).
  // Not when the label changes side, carries a shift (see unclip) or would reach past the figure: plotly then.
  function movedBand(div, shape, ann, oldX) {
    var fl = div._fullLayout, xa = fl.xaxis, px = function (v) { return xa._offset + xa.r2p(v); };
    var path = div.querySelector(".shapelayer path[data-index='0']"), g = div.querySelector(".annotation[data-index='0']");
    var m = path && /^M([^,]+),([^H]+)H([^V]+)V([^H]+)H([^Z]+)Z$/.exec(path.getAttribute("d"));
    var full = fl.annotations && fl.annotations[0];
    if (!m || !g || !full || full.xanchor !== ann.xanchor || full.xshift || (ann.xshift || 0) !== 0) return false;
    var textG = g.querySelector(".annotation-text-g"), box = g.querySelector(".cursor-pointer"), bg = g.querySelector("rect.bg");
    var rot = textG && /^rotate\(([^,]+),([^,]+),([^)]+)\)$/.exec(textG.getAttribute("transform") || "");
    var tr = box && /^translate\(([^,]+),([^)]+)\)$/.exec(box.getAttribute("transform") || "");
    if (!rot || !tr || !bg) return false;
    var x0 = px(shape.x0), x1 = px(shape.x1), centre = +rot[2] + (px(ann.x) - px(oldX));
    var width = +bg.getAttribute("width") + 2 * +bg.getAttribute("x"), left = Math.round(centre - width / 2);
    if (!isFinite(x0) || !isFinite(x1) || !isFinite(centre) || left < 2 || left + width > fl.width - 2) return false;
    path.setAttribute("d", "M" + x0 + "," + m[2] + "H" + x1 + "V" + m[4] + "H" + x0 + "Z");
    textG.setAttribute("transform", "rotate(" + rot[1] + "," + centre + "," + rot[3] + ")");
    box.setAttribute("transform", "translate(" + left + "," + tr[2] + ")");
    return true;
  }
  // An axis range that holds the values [lo, hi]: the current one while they stay in it and fill at least 45 % of it,
  // else a new one with room to grow (the values fill 77 %), from `floor` (or 5 % below lo). The axes that τ and α
  // rescale change range only now and then, and a τ step on a range that stays is drawn without plotly.
  function steady(cur, lo, hi, floor) {
    if (!(hi >= lo)) return cur;
    if (cur && lo >= cur[0] && hi <= cur[1] && hi - cur[0] >= 0.45 * (cur[1] - cur[0])) return cur;
    var bottom = floor != null ? floor : lo - 0.05 * (hi - lo || Math.abs(hi) || 1);
    return [bottom, bottom + 1.3 * (hi - bottom || 1)];
  }
  function extent(values) {
    var lo = Infinity, hi = -Infinity;
    for (var i = 0; i < values.length; i++) { var v = values[i]; if (v == null || !isFinite(v)) continue; if (v < lo) lo = v; if (v > hi) hi = v; }
    return [lo, hi];
  }
  function fitted(values, log) {  // an axis range that shows every value, padded by 5 % (log: in decades, of the values > 0)
    var lo = Infinity, hi = -Infinity;
    for (var i = 0; i < values.length; i++) {
      var v = values[i];
      if (v == null || !isFinite(v) || (log && !(v > 0))) continue;
      v = log ? Math.log10(v) : v;
      if (v < lo) lo = v; if (v > hi) hi = v;
    }
    if (!(hi >= lo)) return null;
    var pad = 0.05 * (hi - lo || Math.abs(hi) || 1);
    return [lo - pad, hi + pad];
  }
  // After a full draw: a title or axis title wider than its figure is wrapped at spaces, an annotation that reaches
  // past an edge is shifted back in, and a legend wider than the figure goes under the plot, one entry a row. Plotly
  // draws at whatever width the column has (a phone's 360 px), so this is measured, not guessed. `keep` (the
  // figure's own layout object, for the explorer's figures) receives the same changes, so that later redraws keep them.
  function wrapText(text, lines) {
    var words = String(text).replace(/<br>/g, " ").split(" "), per = Math.ceil(words.join(" ").length / lines), out = [], line = "";
    words.forEach(function (w) { if (line && (line + " " + w).length > per) { out.push(line); line = w; } else line = line ? line + " " + w : w; });
    if (line) out.push(line);
    return out.join("<br>");
  }
  function unclip(div, keep, again) {
    var svg = div.querySelector && div.querySelector("svg.main-svg");
    if (!svg || !div.layout) return Promise.resolve();
    var box = svg.getBoundingClientRect(), L = div._fullLayout || {}, up = {}, pad = 2;
    if (!(box.width > 0)) return Promise.resolve();
    var past = function (e) { var r = e.getBoundingClientRect(); return r.width > 0 && (r.left < box.left - 0.5 || r.right > box.right + 0.5) ? r : null; };
    var title = div.querySelector(".gtitle"), r;
    if (title && (r = past(title))) {
      var text = (L.title && L.title.text) || title.textContent, lines = Math.ceil(r.width / (box.width - 2 * pad - 20));
      up["title.text"] = wrapText(text, lines);
      up["margin.t"] = ((L.margin && L.margin.t) || 40) + 16 * (lines - 1);
    }
    ["xaxis", "xaxis2"].forEach(function (ax) {
      var t = div.querySelector(".g-" + ax.replace("axis", "") + "title text");
      if (t && L[ax] && L[ax].title && (r = past(t))) {
        up[ax + ".title.text"] = wrapText(L[ax].title.text, Math.ceil(r.width / (L[ax]._length || box.width - 60)));
        up[ax + ".automargin"] = true;
      }
    });
    div.querySelectorAll(".annotation").forEach(function (a) {
      var i = +(a.getAttribute("data-index") || 0), ann = (div.layout.annotations || [])[i];
      if (!ann || !(r = past(a))) return;
      if (r.width > box.width - 2 * pad) {  // wider than the figure: wrapped (and moved in on the next pass)
        up["annotations[" + i + "].text"] = wrapText(ann.text, Math.ceil(r.width / (box.width - 2 * pad - 10)));
        return;
      }
      var shift = r.left < box.left ? box.left + pad - r.left : box.right - pad - r.right;
      up["annotations[" + i + "].xshift"] = (ann.xshift || 0) + shift;
    });
    var renames = [], legend = div.querySelector(".legend");
    if (legend && [].some.call(legend.querySelectorAll(".legendtext"), past)) {  // one entry a row; a wide one wrapped
      up["legend.orientation"] = "v"; up["legend.x"] = 0; up["legend.xanchor"] = "left";
      legend.querySelectorAll(".traces").forEach(function (g) {
        var d = g.__data__ && g.__data__[0], t = g.querySelector(".legendtext");
        if (!d || !d.trace || !t || !(t.getBoundingClientRect().width > box.width / 2)) return;
        var key = d.groupTitle ? "legendgrouptitle.text" : "name", text = d.groupTitle ? d.groupTitle.text : d.trace.name;
        var change = {}; change[key] = wrapText(text, 2); renames.push([change, d.trace.index]);
      });
    }
    if (!Object.keys(up).length) return Promise.resolve();
    var renamed = function () {
      return renames.reduce(function (p, r) { return p.then(function () { return Plotly.restyle(div, r[0], [r[1]]); }); }, Promise.resolve());
    };
    if (keep) Object.keys(up).forEach(function (path) {  // the same change in the figure's own layout
      var parts = path.replace(/\[(\d+)\]/g, ".$1").split("."), o = keep;
      for (var i = 0; i < parts.length - 1; i++) { o[parts[i]] = o[parts[i]] || {}; o = o[parts[i]]; }
      if (!/xshift$/.test(path)) o[parts[parts.length - 1]] = up[path];
    });
    return Plotly.relayout(div, up).then(renamed).then(function () { if (!again) return unclip(div, keep, true); });
  }
  function plotLabel(div, f) {
    var t = f.layout.title; t = t && (t.text || t);
    div.setAttribute("role", "img"); if (t) div.setAttribute("aria-label", String(t));
  }

  // One labelled control: a range (over log10 of the value for log sliders) and a number box that accepts any
  // value in range, as the widget's editable readout does. onChange gets the new value; a refused value is said.
  function numberControl(panel, o, onChange, say) {
    var row = el("label", {"class": "ctl-x-control"}, panel);
    el("span", {"class": "ctl-x-desc"}, row, o.label);
    var f = o.log ? Math.log10 : function (v) { return v; }, g = o.log ? function (v) { return Math.pow(10, v); } : f;
    var range = el("input", {type: "range", min: f(o.min), max: f(o.max), step: o.step, "data-ctl-control": o.name,
                             "aria-label": o.name_long || o.label}, row);
    var box = el("input", {type: "number", min: o.min, max: o.max, step: "any", "data-ctl-box": o.name,
                           "aria-label": (o.name_long || o.label) + ", typed"}, row);
    var said = function (v) { range.setAttribute("aria-valuetext", o.label + " = " + fmt(v, 3)); };
    range.value = f(o.value); box.value = fmt(o.value, 4); said(o.value);
    range.addEventListener("input", function () {
      var v = o.integer ? Math.round(g(+range.value)) : g(+range.value);
      box.value = fmt(v, 4); said(v); onChange(v);
    });
    box.addEventListener("change", function () {
      var v = Number(box.value);
      if (box.value.trim() === "" || !isFinite(v) || v < o.min || v > o.max || (o.integer && v !== Math.round(v))) {
        say(o.label + " must be " + (o.integer ? "a whole number" : "a number") + " in [" + o.min + ", " + o.max + "], got " + box.value);
        return;
      }
      range.value = f(v); said(v); onChange(v);
    });
    return {range: range, box: box, set: function (v, max) {
      if (max != null) { range.max = f(max); box.max = max; o.max = max; }
      range.value = f(v); box.value = fmt(v, 4); said(v);
    }};
  }

  // ---- the temperature explorer ------------------------------------------------------------------------------
  // figuresOnly: the four figures alone, moved by whoever sets this.state and calls request() (lesson 02's widget in
  // JupyterLab, whose sliders are ipywidgets): no controls, no readout, no address.
  function TemperatureExplorer(host, spec, figuresOnly) {
    var self = this, s = copy(spec.state);
    this.host = host; this.spec = spec; this.state = s; this.timings = []; this.figuresOnly = !!figuresOnly;
    host.ctlState = s; host.ctlTimings = this.timings; host.ctlExplorable = this;
    if (figuresOnly) {  // "readout": with the readout above the figures, drawn in the same update
      if (figuresOnly === "readout") { this.readout = el("div", {"class": "ctl-x-readout"}, host); this.checkNote = el("p", {"class": "ctl-x-refused"}, host); }
      this.figures(el("div", {"class": "ctl-x-figures"}, host)); return;
    }
    var panel = el("div", {"class": "ctl-x-controls"}, host), note = el("div", {"class": "ctl-x-readout"}, host);
    var grid = el("div", {"class": "ctl-x-figures"}, host);
    this.readout = note;
    var say = function (msg) { note.innerHTML = ""; el("p", {"class": "ctl-x-refused"}, note, msg); };
    var col1 = el("div", {"class": "ctl-x-column"}, panel), col2 = el("div", {"class": "ctl-x-column"}, panel);
    var r = spec.ranges;
    this.controls = {
      tau: numberControl(col1, {name: "tau", label: "τ", name_long: "temperature τ", log: true, min: r.tau[0], max: r.tau[1], step: 0.01, value: s.tau},
                         function (v) { s.tau = v; self.request("tau"); }, say),
      alpha: numberControl(col1, {name: "alpha", label: "α", name_long: "α, the fraction of negatives the hard loss keeps", min: r.alpha[0], max: r.alpha[1], step: 0.01, value: s.alpha},
                           function (v) { s.alpha = v; self.request("alpha"); }, say),
      lam: numberControl(col1, {name: "lam", label: "λ", name_long: "λ, the weight of the simple loss's negatives", log: true, min: r.lam[0], max: r.lam[1], step: 0.01, value: s.lam},
                         function (v) { s.lam = v; self.request("lam"); }, say)};
    var srow = el("label", {"class": "ctl-x-control"}, col2);
    el("span", {"class": "ctl-x-desc"}, srow, "negatives");
    var select = el("select", {"data-ctl-control": "source", "aria-label": "the set of negatives"}, srow);
    Object.keys(spec.sources).forEach(function (key) {
      var opt = el("option", {value: key}, select, spec.sources[key].label);
      if (key === s.source) opt.selected = true;
    });
    this.controls.k = numberControl(col2, {name: "k", label: "K", name_long: "K, the number of negatives", integer: true, min: 2, max: spec.sources[s.source].max_k, step: 1,
                                           value: s.k}, function (v) { s.k = v; self.request("k"); }, say);
    this.controls.pos = numberControl(col2, {name: "pos", label: "s_ii", name_long: "s_ii, the positive's similarity", min: r.pos[0], max: r.pos[1], step: 0.01, value: s.pos},
                                      function (v) { s.pos = v; self.request("pos"); }, say);
    this.select = select;
    select.addEventListener("change", function () {  // a new kind of set: K clamped to what it has, s_ii its own
      s.source = select.value;
      var src = spec.sources[s.source];
      s.k = Math.min(s.k, src.max_k); s.pos = src.pos;
      self.controls.k.set(s.k, src.max_k); self.controls.pos.set(s.pos);
      self.request("source");
    });
    var lrow = el("label", {"class": "ctl-x-control"}, col2), log = el("input", {type: "checkbox", "data-ctl-control": "log_r", "aria-label": "r_i on a log scale"}, lrow);
    el("span", {}, lrow, " log scale for r_i");
    log.checked = !!s.log_r; this.logBox = log;
    log.addEventListener("change", function () { s.log_r = log.checked; self.request("log_r"); });
    // a reset, the presets (the paper's figure, each exercise's starting setting) and the state in the page's address
    var brow = el("div", {"class": "ctl-x-control ctl-x-buttons"}, col2);
    var reset = el("button", {type: "button", "data-ctl-control": "reset"}, brow, "↺ reset");
    reset.addEventListener("click", function () { self.presetSelect.value = ""; self.apply(spec.state); });
    var prow = el("label", {"class": "ctl-x-control"}, col1);
    el("span", {"class": "ctl-x-desc"}, prow, "preset");
    var presets = el("select", {"data-ctl-control": "preset", "aria-label": "a preset setting"}, prow);
    el("option", {value: ""}, presets, "choose a setting…");
    PRESETS.forEach(function (p, i) { el("option", {value: String(i)}, presets, p.label); });
    presets.addEventListener("change", function () {
      if (presets.value === "") return;
      var p = PRESETS[+presets.value], st = copy(spec.state);
      Object.keys(p.state).forEach(function (key) { st[key] = p.state[key]; });
      if (p.state.source && p.state.pos == null) st.pos = spec.sources[st.source].pos;
      if (p.state.k == null) st.k = Math.min(st.k, spec.sources[st.source].max_k);
      self.apply(st);
    });
    this.presetSelect = presets;
    this.figures(grid);
    var fromUrl = readHash(spec);
    if (fromUrl) KEYS.forEach(function (key) { if (fromUrl[key] != null) s[key] = fromUrl[key]; });
    if (fromUrl) this.setControls();
    if (fromUrl && fromUrl.refused.length) {  // said above the readout until the reader changes something
      this.urlNote = el("p", {"class": "ctl-x-refused", role: "alert"}, host,
                        "The page's address asked for " + fromUrl.refused.join("; ") + ": " +
                        (fromUrl.refused.length > 1 ? "those were" : "that was") + " left out, and the explorer shows its default instead.");
      host.insertBefore(this.urlNote, note);
    }
  }
  TemperatureExplorer.prototype.figures = function (grid) {  // the four empty figures' divs
    var self = this;
    this.figs = {}; this.divs = {};
    ["penalty", "entropy", "loss", "gradient"].forEach(function (name) {
      self.figs[name] = figure(self.spec, name);
      (DIRECT_LINES[name] || []).forEach(function (i) { self.figs[name].data[i].line.simplify = false; });
      self.divs[name] = el("div", {"class": "ctl-x-plot", "data-ctl-plot": name}, grid);
      plotLabel(self.divs[name], self.figs[name]);
    });
  };
  var DIRECT_LINES = {penalty: [0, 1, 6], entropy: [1, 5]};  // the lines a direct draw writes: plotly keeps all their points too
  // [WL21] Fig 3 and the settings lesson 02's exercises start from (the settings, not the answers)
  var PRESETS = [
    {label: "[WL21] Fig 3: r_i at τ = 0.07 (K = 256 spread)", state: {source: "spread", k: 256, tau: 0.07, alpha: 0.1, log_r: false}},
    {label: "[WL21] Fig 3 on a log scale: the slope 1/τ", state: {source: "spread", k: 256, tau: 0.2, alpha: 0.1, log_r: true}},
    {label: "Exercise 1: the nearest negative's share (τ = 0.05)", state: {source: "spread", k: 256, tau: 0.05, alpha: 0.1, log_r: false}},
    {label: "Exercise 2: H(r_i) near log K (τ = 10)", state: {source: "spread", k: 256, tau: 10, alpha: 0.1, log_r: false}},
    {label: "Exercise 3: the interval [s_α, 1] (α = 0.1)", state: {source: "spread", k: 256, tau: 0.2, alpha: 0.1, log_r: false}},
    {label: "Real digits' negatives, τ = 0.2", state: {source: "digits", k: 1796, tau: 0.2, alpha: 0.1, log_r: false}}];
  var HASH = "#explorer?", KEYS = ["tau", "alpha", "lam", "source", "k", "pos", "log_r"];
  // The explorer's state from the page's address (#explorer?tau=…&…), checked against the ranges: a set of negatives
  // named there brings its own s_ii and caps K, as choosing it in the menu does (unless the address gives them too).
  // What the address gets wrong is kept out and listed in out.refused, which the page says.
  function readHash(spec) {
    if (location.hash.indexOf(HASH) !== 0) return null;
    var q = new URLSearchParams(location.hash.slice(HASH.length)), out = {refused: []}, r = spec.ranges;
    var refuse = function (key, why) { out.refused.push(key + "=" + q.get(key) + " (" + why + ")"); };
    var num = function (key, lo, hi, whole) {
      if (!q.has(key)) return;
      var v = Number(q.get(key));
      if (q.get(key).trim() === "" || !isFinite(v) || v < lo || v > hi || (whole && v !== Math.round(v)))
        refuse(key, (whole ? "a whole number" : "a number") + " in [" + lo + ", " + hi + "]");
      else out[key] = v;
    };
    if (q.has("source")) {
      if (spec.sources[q.get("source")]) out.source = q.get("source");
      else refuse("source", "one of " + Object.keys(spec.sources).join(", "));
    }
    var src = spec.sources[out.source || spec.state.source];
    num("tau", r.tau[0], r.tau[1]); num("alpha", r.alpha[0], r.alpha[1]); num("lam", r.lam[0], r.lam[1]);
    num("pos", r.pos[0], r.pos[1]); num("k", 2, src.max_k, true);
    if (out.source && out.pos == null && !q.has("pos")) out.pos = src.pos;
    if (out.source && out.k == null && !q.has("k")) out.k = Math.min(spec.state.k, src.max_k);
    if (q.has("log_r")) {
      if (q.get("log_r") === "1" || q.get("log_r") === "0") out.log_r = q.get("log_r") === "1";
      else refuse("log_r", "0 or 1");
    }
    Array.from(q.keys()).forEach(function (key) { if (KEYS.indexOf(key) < 0) refuse(key, "not a setting of the explorer"); });
    return out;
  }
  TemperatureExplorer.prototype.writeHash = function () {
    var s = this.state, q = new URLSearchParams();
    KEYS.forEach(function (key) { q.set(key, key === "log_r" ? (s.log_r ? "1" : "0") : typeof s[key] === "number" ? fmt(s[key], 6) : s[key]); });
    try { history.replaceState(null, "", HASH + q.toString()); } catch (e) { /* a page that may not change its address */ }
  };
  TemperatureExplorer.prototype.setControls = function () {  // the controls show the state
    var s = this.state, c = this.controls;
    this.select.value = s.source;
    c.k.set(s.k, this.spec.sources[s.source].max_k); c.tau.set(s.tau); c.alpha.set(s.alpha); c.lam.set(s.lam); c.pos.set(s.pos);
    this.logBox.checked = !!s.log_r;
  };
  TemperatureExplorer.prototype.apply = function (state) {  // a whole new state (reset, preset): everything redrawn
    var s = this.state;
    KEYS.forEach(function (key) { if (state[key] != null) s[key] = state[key]; });
    this.setControls();
    return this.request("init");
  };
  TemperatureExplorer.prototype.negatives = function () {  // similarity_set(source, k, seed): (s_ii of the set, sorted negatives)
    var s = this.state, src = this.spec.sources[s.source];
    var neg = s.source === "spread" ? M.linspace(s.k) : src.draws.slice(0, s.k).sort(function (a, b) { return a - b; });
    return neg;
  };
  // A control asks for a redraw; while one is being drawn, later requests are merged into the next, so that a fast
  // drag draws its latest value instead of queueing every step it passed.
  TemperatureExplorer.prototype.request = function (what) {
    if (what !== "init" && this.presetSelect) this.presetSelect.value = "";  // a moved control: no preset is shown now
    if (what !== "init" && this.urlNote) { this.urlNote.remove(); this.urlNote = null; }
    this.pending = this.pending || {};
    this.pending[what] = true;
    if (!this.busy) this.drain();
  };
  TemperatureExplorer.prototype.drain = function () {  // draws the pending changes, merged, until none is left
    var self = this;
    this.busy = true;
    (function next() {
      var kinds = self.pending; self.pending = null;
      self.update(kinds).then(function () {
        if (self.pending) { requestAnimationFrame(next); return; }
        self.busy = false;
        var stale = self.stale || {};
        if (stale.penalty || stale.entropy || stale.loss || stale.gradient) self.scheduleSync();
      }, function (e) { self.busy = false; throw e; });
    })();
  };
  TemperatureExplorer.prototype.update = function (what) {  // what: a kind ("tau", "k", ...) or {kind: true, ...}
    if (typeof what === "string") { var one = {}; one[what] = true; what = one; }
    var t0 = performance.now(), s = this.state, spec = this.spec, F = this.figs, taus = spec.tau_grid, self = this;
    var redoSet = what.init || what.source || what.k, oldSAlpha = this.sAlpha;
    if (redoSet) {
      this.neg = this.negatives();
      var neg = this.neg, counts = M.histc(neg, spec.n_bins, -1, 1), centres = [];
      for (var b = 0; b < spec.n_bins; b++) centres.push((b + 0.5) * 2 / spec.n_bins - 1);
      spec.reference_taus.forEach(function (t, i) { F.penalty.data[2 + i].x = neg; F.penalty.data[2 + i].y = M.relativePenalty(neg, t); });
      F.penalty.data[7].x = centres; F.penalty.data[7].y = counts;
      this.histRange = [0, 4 * Math.max.apply(null, counts)];
      F.entropy.data[0].x = taus; F.entropy.data[0].y = M.entropyCurve(neg, taus);
      F.entropy.data[4].x = [taus[0], taus[taus.length - 1]]; F.entropy.data[4].y = [Math.log(neg.length), Math.log(neg.length)];
    }
    var neg = this.neg;
    if (redoSet || what.pos) {
      var c = this.curves = M.lossCurves(s.pos, neg, taus);
      this.regimes = M.limitRegimes(c, taus);
      var top = Math.max.apply(null, c.loss), bottom = Math.max(Math.min.apply(null, c.loss), top * 1e-4);
      var low = taus[0], high = taus[taus.length - 1];
      ["loss", "triplet", "simple"].forEach(function (name, i) { F.loss.data[i].x = taus; F.loss.data[i].y = c[name]; });
      this.lossRange = [Math.log10(bottom) - 0.1, Math.log10(top) + 0.1];
      var mid = function (a, b) { return (Math.log10(a) + Math.log10(b)) / 2; }, ann = F.loss.layout.annotations;
      ann[0].x = mid(low, this.regimes[0] || low); ann[0].visible = !!this.regimes[0];
      ann[1].x = mid(this.regimes[1] || high, high); ann[1].visible = !!this.regimes[1];
      F.loss.layout.shapes[0].x0 = low; F.loss.layout.shapes[0].x1 = this.regimes[0] || low;
      F.loss.layout.shapes[1].x0 = this.regimes[1] || high; F.loss.layout.shapes[1].x1 = high;
    }
    if (redoSet || what.alpha || !this.sAlpha) {
      this.sAlpha = M.sAlpha(neg, s.alpha); this.nKept = M.nInformative(neg.length, s.alpha);
      F.penalty.layout.shapes[0].x0 = this.sAlpha;
      var lab = F.penalty.layout.annotations[0];  // the label reads towards the middle of the axis, where it has room
      lab.xanchor = this.sAlpha > 0 ? "right" : "left"; lab.xshift = 0;
      F.entropy.data[1].x = taus; F.entropy.data[1].y = M.entropyCurve(neg, taus, s.alpha);
      F.entropy.data[5].x = [taus[0], taus[taus.length - 1]]; F.entropy.data[5].y = [Math.log(this.nKept), Math.log(this.nKept)];
    }
    F.penalty.data[6].y = [s.lam, s.lam];
    F.penalty.layout.annotations[0].x = this.sAlpha;
    F.penalty.layout.yaxis.type = s.log_r ? "log" : "linear";
    // what depends on τ (every update but λ's and the log scale's redraws it: cheap next to plotting)
    var r = this.r = M.relativePenalty(neg, s.tau), rh = this.rHard = M.relativePenalty(neg, s.tau, s.alpha);
    F.penalty.data[0].x = neg; F.penalty.data[0].y = r; F.penalty.data[1].x = neg; F.penalty.data[1].y = rh;
    F.penalty.data[0].meta = {tau: s.tau}; F.penalty.data[1].meta = {tau: s.tau, alpha: s.alpha};
    this.h = M.penaltyEntropy(neg, s.tau); this.hHard = M.penaltyEntropy(neg, s.tau, s.alpha);
    F.entropy.data[2].x = [s.tau]; F.entropy.data[2].y = [this.h]; F.entropy.data[3].x = [s.tau]; F.entropy.data[3].y = [this.hHard];
    this.loss = M.contrastiveLoss(s.pos, neg, s.tau);
    F.loss.data[3].x = [s.tau]; F.loss.data[3].y = [this.loss];
    var g = M.lossGradients(s.pos, neg, s.tau), k = neg.length, nTop = Math.min(spec.n_top, k), rest = 0;
    for (var j = 0; j < k - nTop; j++) rest += g.neg[j];
    var heights = [-g.pos], texts = ["s_ii = " + s.pos.toFixed(3)];
    for (var rank = 0; rank < spec.n_top; rank++) {
      heights.push(rank < nTop ? g.neg[k - 1 - rank] : 0);
      texts.push(rank < nTop ? "s = " + neg[k - 1 - rank].toFixed(3) : "");
    }
    heights.push(rest); texts.push((k - nTop) + " negatives");
    heights.forEach(function (hgt, i) { F.gradient.data[i].y = [hgt]; F.gradient.data[i].hovertext = [texts[i]]; });
    if (this.readout) this.readout.innerHTML = this.readoutHtml();
    // only the figures this change moves: λ and the log scale move r_i's plot alone, α the two of r_i and H(r_i),
    // s_ii the loss and the bars; τ, K and the set move all four
    var all = what.init || what.source || what.k || what.tau;
    var moved = {penalty: all || what.alpha || what.lam || what.log_r, entropy: all || what.alpha,
                 loss: all || what.pos, gradient: all || what.pos};
    // Every axis has a range set here (plotly's autorange would move with the markers' size at the ends), so that a
    // change that keeps the ranges moves points only. The axes that τ and α rescale (r_i's and the bars') keep their
    // range while the values stay in it (steady); λ and α's lines and the set's histogram stay inside theirs.
    var A = this.axes = (redoSet || !this.axes) ? {} : this.axes, rAxis = [];
    for (var t = 0; t < 7; t++) rAxis = rAxis.concat(F.penalty.data[t].y);
    var rx = extent(rAxis), push = Math.max(heights[0], heights.slice(1).reduce(function (a, b) { return a + b; }, 0));
    A.penalty = s.log_r ? fitted(rAxis, true) : steady(A.penaltyLinear, rx[0], rx[1]);
    if (!s.log_r) A.penaltyLinear = A.penalty;
    A.gradient = steady(A.gradient, 0, push, 0);
    var logK = Math.log(neg.length), tauAxis = [Math.log10(taus[0]) - 0.06, Math.log10(taus[taus.length - 1]) + 0.06];
    var ranges = {penalty: {yaxis: A.penalty, yaxis2: this.histRange},
                  entropy: {xaxis: tauAxis, yaxis: [-0.06 * logK, 1.06 * logK]},
                  loss: {xaxis: tauAxis, yaxis: this.lossRange}, gradient: {yaxis: A.gradient}};
    // τ, α and λ move points, lines, bars, the s_α band and its label, on axes that mostly keep their ranges: then each
    // figure they move is drawn by writing those SVG attributes (direct); a figure whose axis range changed, or whose
    // change the SVG cannot take (a log axis, the label changing side), and every other change: one plotly redraw.
    var pointsOnly = this.drawn && !(what.init || what.source || what.k || what.pos || what.log_r);
    var traces = {penalty: (what.tau ? [0, 1] : []).concat(what.alpha && !what.tau ? [1] : []).concat(what.lam ? [6] : []),
                  entropy: (what.alpha ? [1, 5] : []).concat(what.tau ? [2, 3] : what.alpha ? [3] : []),
                  loss: what.tau ? [3] : [], gradient: what.tau ? [0, 1, 2, 3, 4, 5, 6] : []};
    var names = ["penalty", "entropy", "loss", "gradient"].filter(function (name) { return moved[name]; });
    var stale = this.stale = this.stale || {}, by = {};
    var sameRanges = function (name) {
      var L = self.divs[name]._fullLayout, want = ranges[name];
      return L && Object.keys(want).every(function (ax) {
        var r = want[ax], have = L[ax] && L[ax].range;
        return r && have && L[ax].autorange === false && have[0] === r[0] && have[1] === r[1];
      });
    };
    var direct = function (name) {  // true when every attribute the change moves was written
      var div = self.divs[name], fig = F[name];
      if (!pointsOnly || (name === "penalty" && s.log_r) || !div._fullLayout || !sameRanges(name)) return false;
      var fl = div._fullLayout, groups = traceGroups(div);
      if (name === "gradient") return stackedBars(div, groups);
      var ok = traces[name].every(function (i) {
        var t = fig.data[i], g = groups[i], full = div._fullData && div._fullData[i];
        if (!g || !full) return false;
        var xa = axisOf(fl, full.xaxis), ya = axisOf(fl, full.yaxis);
        return full.mode === "markers" ? markerPoint(g, t, xa, ya) : full.mode === "lines" && full.line.simplify === false && linePath(g, t, xa, ya);
      });
      if (ok && name === "penalty" && what.alpha) ok = movedBand(div, fig.layout.shapes[0], fig.layout.annotations[0], oldSAlpha);
      return ok;
    };
    var drawn = names.map(function (name) {
      var fig = F[name], div = self.divs[name];
      if (direct(name)) { by[name] = "direct"; stale[name] = true; return null; }
      by[name] = "plotly"; stale[name] = false;
      fitAxes(fig, ranges[name]);
      fig.layout.datarevision = (fig.layout.datarevision || 0) + 1;
      return Plotly.react(div, fig.data, fig.layout, CONFIG).then(function () { return unclip(div, fig.layout); });
    });
    s.redrawn = names; s.drawnBy = by; s.fast = names.every(function (name) { return by[name] === "direct"; });
    if (!this.figuresOnly && (!what.init || location.hash.indexOf(HASH) === 0 || this.touched)) this.writeHash();
    if (!what.init) this.touched = true;
    return Promise.all(drawn).then(function () { self.drawn = true; self.timings.push(performance.now() - t0); s.updates = (s.updates || 0) + 1; });
  };
  // Plotly's own copy of what a direct draw moved (its data for hover, its calculated points) is brought in step once
  // the controls rest: one plotly redraw of each figure drawn directly since, each in a task of its own, none while a
  // change waits or is drawn. It draws what is already there; it only makes hovering read the new values.
  var SYNC_MS = 300;
  TemperatureExplorer.prototype.scheduleSync = function () {
    var self = this;
    clearTimeout(this.syncTimer);
    this.syncTimer = setTimeout(function () { self.syncTimer = null; self.sync(); }, SYNC_MS);
  };
  TemperatureExplorer.prototype.sync = function () {
    var self = this, stale = this.stale || {}, name = ["penalty", "entropy", "loss", "gradient"].filter(function (n) { return stale[n]; })[0];
    if (!name || this.syncTimer) return Promise.resolve(false);
    if (this.busy || this.pending) { this.scheduleSync(); return Promise.resolve(false); }
    var fig = this.figs[name], div = this.divs[name];
    this.busy = true; stale[name] = false;
    fig.layout.datarevision = (fig.layout.datarevision || 0) + 1;
    return Plotly.react(div, fig.data, fig.layout, CONFIG).then(function () { return unclip(div, fig.layout); }).then(function () {
      self.state.synced = (self.state.synced || 0) + 1;
      self.busy = false;
      if (self.pending) self.drain();
      else setTimeout(function () { self.sync(); }, 0);  // the next figure, if any, in a task of its own
      return true;
    }, function (e) { self.busy = false; throw e; });
  };
  // The kernel's numbers for the settings it last saw (lesson 02 in JupyterLab): when they are the settings shown, the
  // readout's numbers must agree with them to 1e-9; host.dataset.ctlConfirmed says "yes", or "no" with the note shown.
  TemperatureExplorer.prototype.confirm = function (kernel) {
    var s = this.state, near = function (a, b, tol) { return Math.abs(a - b) <= tol * Math.max(1, Math.abs(b)); };
    if (!kernel || !this.neg || kernel.source !== s.source || kernel.k !== s.k || !near(kernel.tau, s.tau, 1e-12) ||
        !near(kernel.alpha, s.alpha, 1e-12) || !near(kernel.lam, s.lam, 1e-12) || !near(kernel.pos, s.pos, 1e-12)) return null;
    var mine = {h: this.h, h_hard: this.hHard, loss: this.loss, n_kept: this.nKept, s_alpha: this.sAlpha}, off = [];
    Object.keys(mine).forEach(function (key) { if (!near(mine[key], kernel[key], 1e-9)) off.push(key + " " + mine[key] + " here, " + kernel[key] + " in the kernel"); });
    this.host.dataset.ctlConfirmed = off.length ? "no" : "yes"; this.host.dataset.ctlConfirmedTau = String(s.tau);
    if (this.checkNote) this.checkNote.textContent = off.length ? "The kernel computes other numbers for these settings: " + off.join("; ") : "";
    return !off.length;
  };
  TemperatureExplorer.prototype.readoutHtml = function () {
    var s = this.state, neg = this.neg, k = neg.length, r = this.r, rh = this.rHard;
    var shares = function (x) { return [1, 5, 10].filter(function (n) { return n <= k; }).map(function (n) {
      var t = 0; for (var i = k - n; i < k; i++) t += x[i]; return pct(t); }).join(" / "); };
    var hard = M.contrastiveLoss(s.pos, neg, s.tau, s.alpha), simple = M.simpleLoss(s.pos, neg, s.lam), reg = this.regimes;
    var regimes = (reg[0] ? "Eq 6 within 5% for τ ≤ " + fmt(reg[0], 3) : "Eq 6 never within 5%") + "; " +
                  (reg[1] ? "Eq 7 within 5% for τ ≥ " + fmt(reg[1], 3) : "Eq 7 never within 5%");
    return "<b>τ = " + fmt(s.tau, 3) + "</b>, <b>α = " + s.alpha.toFixed(2) + "</b>: the hard loss keeps the " + this.nKept +
      " nearest of K = " + k + " negatives (s ≥ s_α = " + this.sAlpha.toFixed(3) + "); λ = " + fmt(s.lam, 2) +
      " (λK = " + fmt(s.lam * k, 2) + "); s_ii = " + s.pos.toFixed(2) + "<br><b>H(r_i)</b> = " + this.h.toFixed(3) +
      " nats of at most log K = " + Math.log(k).toFixed(3) + "; hard: " + this.hHard.toFixed(3) + " of log " + this.nKept + " = " +
      Math.log(this.nKept).toFixed(3) + "<br><b>share of the push on the nearest 1 / 5 / 10 negatives</b>: " + shares(r) +
      " (hard: " + shares(rh) + ")<br><b>loss</b> (Eq 1) = " + fmt(this.loss, 4) + "; hard (Eq 9) = " + fmt(hard, 4) +
      "; simple (Eq 3, λ) = " + fmt(simple, 4) + "; " + regimes;
  };

  // ---- the hypersphere playground, replayed ------------------------------------------------------------------
  function decode(b64, scale) {  // little-endian int16 → float64 / scale
    var bytes = atob(b64), n = bytes.length / 2, out = new Float64Array(n);
    for (var i = 0; i < n; i++) {
      var v = bytes.charCodeAt(2 * i) | (bytes.charCodeAt(2 * i + 1) << 8);
      out[i] = (v >= 32768 ? v - 65536 : v) / scale;
    }
    return out;
  }
  function Replay(host, spec) {
    var self = this, s = copy(spec.state);
    this.host = host; this.spec = spec; this.state = s; this.timer = null; this.decoded = {};
    host.ctlState = s; host.ctlExplorable = this; host.ctlShownSteps = [];  // every step drawn, in order
    var panel = el("div", {"class": "ctl-x-controls"}, host);
    var row = el("label", {"class": "ctl-x-control"}, panel);
    el("span", {"class": "ctl-x-desc"}, row, "loss");
    this.lossSelect = el("select", {"data-ctl-control": "loss"}, row);
    spec.losses.forEach(function (key) {
      var o = el("option", {value: key}, self.lossSelect, spec.loss_labels[key]); if (key === s.loss) o.selected = true;
    });
    var trow = el("div", {"class": "ctl-x-control ctl-x-taus"}, panel);
    el("span", {"class": "ctl-x-desc"}, trow, "τ");
    this.tauButtons = spec.taus.map(function (t) {
      var b = el("button", {type: "button", "data-ctl-tau": String(t)}, trow, String(t));
      b.addEventListener("click", function () { s.tau = t; self.show(); });
      return b;
    });
    var prow = el("div", {"class": "ctl-x-control"}, panel);
    this.play = el("button", {type: "button", "data-ctl-control": "play"}, prow, "▶ play");
    this.scrub = el("input", {type: "range", min: 0, max: spec.frame_steps.length - 1, step: 1, "data-ctl-control": "frame"}, prow);
    this.scrub.value = s.frame;
    this.scrub.setAttribute("aria-valuetext", "frame " + s.frame);
    this.stepLabel = el("span", {"class": "ctl-x-value"}, prow);
    this.readout = el("div", {"class": "ctl-x-readout"}, host);
    var grid = el("div", {"class": "ctl-x-figures"}, host);
    this.lossSelect.addEventListener("change", function () { s.loss = self.lossSelect.value; self.show(); });
    this.scrub.addEventListener("input", function () { self.stop(); s.frame = +self.scrub.value; self.show(); });
    this.play.addEventListener("click", function () { self.timer ? self.stop() : self.start(); });
    this.figs = {sphere: figure(spec, "sphere"), history: figure(spec, "history")};
    this.scrub.setAttribute("aria-label", "the step shown");
    this.lossSelect.setAttribute("aria-label", "the loss");
    this.divs = {sphere: el("div", {"class": "ctl-x-plot", "data-ctl-plot": "sphere"}, grid),
                 history: el("div", {"class": "ctl-x-plot", "data-ctl-plot": "history"}, grid)};
  }
  Replay.prototype.run = function () {
    var s = this.state, spec = this.spec, tauFree = spec.tau_free.indexOf(s.loss) >= 0;
    return spec.runs.filter(function (r) { return r.loss === s.loss && (tauFree || r.tau === s.tau); })[0];
  };
  Replay.prototype.positions = function (run) {
    if (!this.decoded[run.key]) this.decoded[run.key] = decode(run.frames, this.spec.scale);
    return this.decoded[run.key];
  };
  // ▶ play keeps the designed pace, one frame every frame_ms: the frame shown is the one the clock has reached, so a
  // slow machine drops frames rather than stretching the replay; the last frame is always shown, and ends it.
  Replay.prototype.start = function () {
    var self = this, s = this.state, last = this.spec.frame_steps.length - 1, ms = this.spec.frame_ms;
    if (s.frame >= last) s.frame = 0;
    var first = s.frame, t0 = performance.now(), token = {};
    s.playing = true; this.play.textContent = "❚❚ pause"; this.timer = token; this.playStart = t0; s.longest_frame_ms = 0;
    (function tick() {
      if (self.timer !== token) return;
      var now = performance.now(), due = Math.min(last, first + Math.floor((now - t0) / ms));
      var drawn = Promise.resolve(due !== s.frame ? (s.frame = due, self.scrub.value = due, self.show()) : null).then(function () {
        s.longest_frame_ms = Math.max(s.longest_frame_ms, performance.now() - now);  // the longest frame drawn, for the tests
      });
      if (due >= last) { drawn.then(function () { if (self.timer === token) self.stop(); }); return; }
      drawn.then(function () {  // the next frame when it is due, not before
        var wait = t0 + (due + 1 - first) * ms - performance.now();
        setTimeout(function () { requestAnimationFrame(tick); }, Math.max(0, wait - 8));
      });
    })();
    this.show();
  };
  Replay.prototype.stop = function () {
    if (this.timer) this.state.played_ms = performance.now() - this.playStart;  // how long the play took, for the tests
    this.timer = null; this.state.playing = false; this.play.textContent = "▶ play";
  };
  Replay.prototype.show = function () {
    var s = this.state, spec = this.spec, run = this.run(), F = this.figs, self = this, tauFree = spec.tau_free.indexOf(s.loss) >= 0;
    this.tauButtons.forEach(function (b, i) {
      b.disabled = tauFree; b.classList.toggle("ctl-x-on", !tauFree && spec.taus[i] === s.tau);
    });
    var n = spec.labels.length, xyz = this.positions(run), base = s.frame * n * 3, step = spec.frame_steps[s.frame];
    s.step = step; s.run = run.key; this.host.ctlShownSteps.push(step);
    for (var c = 0; c < spec.n_classes; c++) { F.sphere.data[c].x = []; F.sphere.data[c].y = []; F.sphere.data[c].z = []; }
    for (var i = 0; i < n; i++) {
      var t = F.sphere.data[spec.labels[i]];
      t.x.push(xyz[base + 3 * i]); t.y.push(xyz[base + 3 * i + 1]); t.z.push(xyz[base + 3 * i + 2]);
    }
    var steps = []; for (var j = 0; j <= step; j++) steps.push(j);
    F.history.data[0].x = steps; F.history.data[0].y = run.uniformity.slice(0, step + 1);
    F.history.data[1].x = steps; F.history.data[1].y = run.tolerance.slice(0, step + 1);
    var lastStep = spec.frame_steps[spec.frame_steps.length - 1];
    F.history.layout.xaxis.range = [-0.04 * lastStep, 1.04 * lastStep];  // room for the first and last points' markers
    F.history.layout.yaxis.range = spec.uniformity_range; F.history.layout.yaxis2.range = spec.tolerance_range;
    this.stepLabel.textContent = "step " + step + " of " + spec.frame_steps[spec.frame_steps.length - 1];
    var u = run.uniformity[step], tol = run.tolerance[step];
    this.readout.innerHTML = "<b>" + spec.loss_labels[s.loss] + "</b>" + (tauFree ? "" : ", <b>τ = " + s.tau + "</b>") +
      " · step <b>" + step + "</b> · <b>uniformity</b> −L_u = " + u.toFixed(3) + " (uniform on S²: " + spec.uniform_limit.toFixed(3) +
      ") · <b>tolerance</b> = " + tol.toFixed(3) + " (start: " + run.tolerance[0].toFixed(3) + ")";
    return Promise.all(["sphere", "history"].map(function (name) {
      F[name].layout.datarevision = (F[name].layout.datarevision || 0) + 1;
      return Plotly.react(self.divs[name], F[name].data, F[name].layout, name === "sphere" ? STILL : CONFIG)
        .then(function () { if (!self.unclipped) return unclip(self.divs[name]); });
    })).then(function () { self.unclipped = true; s.shown = (s.shown || 0) + 1; });
  };

  // ---- a stepper: figures the library drew for every combination of a few discrete controls ---------------------
  function Stepper(host, spec) {
    var self = this, s = {choice: spec.controls.map(function (c) { return c.index; })};
    this.host = host; this.spec = spec; this.state = s;
    host.ctlState = s; host.ctlExplorable = this;
    var panel = el("div", {"class": "ctl-x-controls"}, host);
    this.selects = spec.controls.map(function (c, i) {
      var row = el("label", {"class": "ctl-x-control"}, panel);
      el("span", {"class": "ctl-x-desc"}, row, c.label);
      var select = el("select", {"data-ctl-control": c.name}, row);
      c.options.forEach(function (label, j) { var o = el("option", {value: String(j)}, select, label); if (j === c.index) o.selected = true; });
      select.addEventListener("change", function () { s.choice[i] = +select.value; self.show(); });
      return select;
    });
    this.note = el("div", {"class": "ctl-x-readout"}, host);
    var grid = el("div", {"class": "ctl-x-figures ctl-x-wide"}, host);
    this.divs = spec.figure_names.map(function (name) { return el("div", {"class": "ctl-x-plot", "data-ctl-plot": name}, grid); });
  }
  Stepper.prototype.show = function () {
    var self = this, s = this.state, key = s.choice.join("-"), shown = this.spec.states[key];
    s.key = key;
    this.note.innerHTML = shown.note || "";
    return Promise.all(shown.figures.map(function (f, i) {
      var fig = copy(f); fig.layout.template = self.spec.template; fitScreen(fig.layout);
      return Plotly.react(self.divs[i], fig.data, fig.layout, CONFIG).then(function () { return unclip(self.divs[i]); });
    })).then(function () { s.shown = (s.shown || 0) + 1; });
  };

  var kinds = {"figure-stepper": function (host, spec) { return new Stepper(host, spec).show(); },
               "temperature-explorer": function (host, spec) { var x = new TemperatureExplorer(host, spec); return x.update("init"); },
               "hypersphere-replay": function (host, spec) { return new Replay(host, spec).show(); }};
  window.ctlExplorables = {
    math: M, TemperatureExplorer: TemperatureExplorer,
    init: function () {
      return Promise.all(Array.prototype.map.call(document.querySelectorAll("div.ctl-explorable"), function (host) {
        var spec = JSON.parse(host.querySelector("script[type='application/json']").textContent);
        var fallback = host.querySelector(".ctl-x-fallback");
        if (fallback) fallback.remove();
        if (!kinds[spec.kind]) throw new Error("unknown explorable: " + spec.kind);
        return kinds[spec.kind](host, spec);
      }));
    }
  };
})();
