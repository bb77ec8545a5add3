"""The operator console: server-rendered pages to review, approve and block recoveries."""
