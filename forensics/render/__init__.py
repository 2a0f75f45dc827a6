"""Terminal/pipe renderers for the query commands (ingest summary, rejects, events, ranks ...).

Owns presentation only: functions take library results and a rich Console. They never compute
findings or read raw logs. The diagnosis report has its own renderers in `forensics.report`.
"""
