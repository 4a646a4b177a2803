"""What the name servers saw: the PySpark job over journals, time travel, synthetic journals.

Only this module and ``generate``/``truth`` import without PySpark; the table names live
here so that all of them name the tables the same way.
"""

TABLES = (
    "broker_sessions",
    "broker_availability",
    "detection_latency",
    "stale_route_exposure",
    "namesrv_divergence",
    "topic_distribution",
)
