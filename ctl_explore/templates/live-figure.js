// A plotly figure kept by the kernel (ctl_explore.explorer.LiveFigure): the whole figure, as plotly's JSON, comes in
// the `value` of the widget's relay, first when the figure is built and then after each change, and is drawn with
// Plotly.react (which keeps what the reader did to the view, a 3-D camera or a zoom, by the figures' `uirevision`).
// Figures that arrive while a draw runs are drawn once it ends, the latest only.
const CONFIG = { displaylogo: false, responsive: true };

async function render({ model, el }) {
  const [Plotly, relay] = await Promise.all([ctlPlotly(model), ctlRelay(model)]);
  const div = document.createElement("div");
  div.className = "ctl-live-figure";
  el.appendChild(div);
  let drawing = null, again = false, gone = false;
  const draw = () => {
    if (gone || !relay.get("value")) return;
    if (drawing) { again = true; return; }
    const fig = JSON.parse(relay.get("value"));
    drawing = Plotly.react(div, fig.data, fig.layout || {}, CONFIG).finally(() => {
      drawing = null;
      if (again) { again = false; draw(); }
    });
  };
  draw();
  relay.on("change:value", draw);
  return () => { gone = true; relay.off("change:value", draw); Plotly.purge(div); };
}

export default { render };
