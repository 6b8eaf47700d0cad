"""The panel's side of the one port between a GPU host's agent and the panel.

`/agent/v1/...`, JSON over HTTP(S), each request authenticated by the host's own bearer token
(hardware.credentials). Whatever a request names (an operation, a revision) must belong to
that host, or the answer is 404, the same as for something that does not exist. The agent's
side is hostagent.panel (PanelPort and its HTTP implementation).
"""
