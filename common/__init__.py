"""The small helpers every part may import, code inside a rank too: the error hierarchy, time spans,
signals, a YAML file reader, the drop ledger, the `python -m` entry and the metrics flags. Nothing here
imports Kafka, torch or any other part of trainmedic.
"""
