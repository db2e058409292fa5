"""A soak: faults that arrive at random, as a cluster's do (soak). Its plan draws exponential gaps
with mean `mtbf_s` from the scenario's seed until their sum passes `duration_s` (a Poisson count, at most
`count`), and a kind (rank_killed, rank_hung) and a rank for each; fault j
strikes in attempt j, `gap j` seconds after that attempt's training starts. The same seed plans the same soak,
so a soak replays exactly (`chaos replay`), and its realised fault times feed the forecast's replay
(chaos/forecast, benchmarks/forecast.py).

Acts: inside the ranks, as the kinds it mixes do (chaos/faults/process).
Undone: as those kinds are.
Detected by: the launcher (a dead worker), FT's rank monitor (a stopped rank's missed heartbeats).
"""
