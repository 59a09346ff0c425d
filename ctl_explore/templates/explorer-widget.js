// Lesson 02's temperature explorer in JupyterLab: its four figures, computed and drawn in the browser by the site's
// port of the library (explorables.js, loaded before this) from the traits its ipywidgets sliders are linked to
// (jslink), so a slider's move redraws with no round trip to the kernel: one redraw per change, of the figures it moves,
// and of the readout above them. The kernel's numbers come after, and only confirm the readout (or say where they differ).
// plotly.js is loaded once for the page by ctlPlotly (plotly-loader.js, loaded before this) before the first draw.
const KINDS = {tau: "tau", alpha: "alpha", lam: "lam", pos: "pos", k: "k", log_r: "log_r", source_index: "source"};

async function render({ model, el }) {
  const [, relay] = await Promise.all([ctlPlotly(model), ctlRelay(model)]);  // the kernel's numbers come by the relay
  const spec = model.get("spec");
  const host = document.createElement("div");
  host.className = "ctl-explorable ctl-live-figures";
  host.setAttribute("data-ctl-explorable", "temperature-explorer-figures");
  el.appendChild(host);
  const x = new globalThis.ctlExplorables.TemperatureExplorer(host, spec, "readout");  // the readout is drawn here too
  const read = () => {
    const s = x.state;
    s.tau = model.get("tau"); s.alpha = model.get("alpha"); s.lam = model.get("lam"); s.pos = model.get("pos");
    s.k = model.get("k"); s.log_r = model.get("log_r"); s.source = spec.source_keys[model.get("source_index")];
  };
  const handlers = Object.keys(KINDS).map((trait) => {
    const on = () => { read(); if (x.started) x.request(KINDS[trait]); };
    model.on("change:" + trait, on);
    return [trait, on];
  });
  // the kernel confirms: its numbers for the settings it last saw, checked against the page's own (after the redraw)
  const confirm = () => { const k = relay.get("value") || {}; if (!x.busy) x.confirm(k); else setTimeout(confirm, 20); };
  relay.on("change:value", confirm);
  const update = x.update.bind(x);  // and after each redraw, against the kernel's latest numbers
  x.update = (what) => update(what).then((done) => { x.confirm(relay.get("value") || {}); return done; });
  const stop = () => relay.off("change:value", confirm);
  // the first draw once the output is on the page (plotly sizes a figure to its div), then a redraw at each new width
  let frame = null, width = 0;
  const start = () => {
    frame = null;
    if (!host.isConnected || host.clientWidth === 0) { frame = requestAnimationFrame(start); return; }
    read(); x.started = true; width = host.clientWidth; x.request("init");
  };
  frame = requestAnimationFrame(start);
  const resized = new ResizeObserver(() => {
    if (!x.started || host.clientWidth === width) return;
    width = host.clientWidth;
    Object.values(x.divs).forEach((div) => { if (div.data) globalThis.Plotly.Plots.resize(div); });
  });
  resized.observe(host);
  return () => {
    if (frame !== null) cancelAnimationFrame(frame);
    resized.disconnect();
    handlers.forEach(([trait, on]) => model.off("change:" + trait, on));
    stop();
  };
}

export default { render };
