// plotly.js for the package's widgets in JupyterLab, loaded once per page. anywidget gives each widget model about
// 2 s to import its front-end code and drops every message sent to a model that takes longer; a widget carrying all
// of plotly.js (near 5 MB) can take that long on a busy machine. So each widget's code is small, and plotly.js comes
// in the widget's `_plotly_js` trait and runs here, once, when the first view is drawn (no such window applies there).
function ctlPlotly(model) {
  if (globalThis.Plotly) return Promise.resolve(globalThis.Plotly);  // a page that has plotly already keeps its own
  if (!globalThis.ctlPlotlyLoading) {
    const loading = new Promise((resolve, reject) => {
      const source = model.get("_plotly_js");
      if (!source) { reject(new Error("ctl_explore: the widget sent no plotly.js (its _plotly_js trait is empty)")); return; }
      const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
      const script = document.createElement("script");
      script.onload = () => {
        URL.revokeObjectURL(url);
        if (globalThis.Plotly) resolve(globalThis.Plotly);
        else reject(new Error("ctl_explore: plotly.js ran but defined no global Plotly (is an AMD loader on the page?)"));
      };
      script.onerror = () => { URL.revokeObjectURL(url); reject(new Error("ctl_explore: plotly.js could not be loaded")); };
      script.src = url;
      document.head.appendChild(script);
    });
    loading.catch(() => { if (globalThis.ctlPlotlyLoading === loading) globalThis.ctlPlotlyLoading = null; });  // the next view tries again
    globalThis.ctlPlotlyLoading = loading;
  }
  return globalThis.ctlPlotlyLoading;
}

// The page's copy of the widget's relay (ctl_explore.explorer.Relay), a bare ipywidgets model that brings what the kernel
// sends the widget after it opened: anywidget drops the messages it holds for a model whose front end was not ready in
// time, a core model's are never held. Its `value` is the latest the kernel sent; `change:value` says a new one came.
function ctlRelay(model) {
  const ref = model.get("_relay"), manager = model.widget_manager;
  if (typeof ref !== "string" || !ref.startsWith("IPY_MODEL_") || !manager || typeof manager.get_model !== "function")
    return Promise.reject(new Error(`ctl_explore: the widget's relay cannot be reached (_relay = ${ref})`));
  return manager.get_model(ref.slice("IPY_MODEL_".length));
}
