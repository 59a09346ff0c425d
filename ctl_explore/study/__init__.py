"""The temperature study of lesson 09, one module per job: plan, measure, rows, stats, findings, calibration, report, workers and runner (appendices 16, 20 and 21 to 27)."""
