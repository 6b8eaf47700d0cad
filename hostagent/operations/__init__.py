"""What this host does for an operation, on plain data: the order the panel sent when the
operation began (hostagent.panel.PanelPort.begin), progress and results through the port.

One module per kind; `runner.run_operation` begins, keeps the operation alive, dispatches by
kind and makes sure it ends whatever happens.
"""
