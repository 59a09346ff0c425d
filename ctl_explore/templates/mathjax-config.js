MathJax.Hub.Config({
  tex2jax: {inlineMath: [['$','$'], ['\\(','\\)']], displayMath: [['$$','$$'], ['\\[','\\]']],
            processEscapes: true, processEnvironments: true},
  TeX: {equationNumbers: {autoNumber: "AMS", useLabelIds: true}},
  "HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null,
               styles: {"@font-face": {"font-family": "MathJax_Blank", src: "local('MathJax_Blank')"}}},
  displayAlign: "center", messageStyle: "none", showMathMenu: false
});
MathJax.Hub.Register.StartupHook("End", function () { window.ctlSite && window.ctlSite.mathDone(); });
