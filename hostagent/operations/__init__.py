"""What this host does for an operation: the order the panel sent when the operation began
(serving.wire.Order, from hostagent.panel.PanelPort.begin), progress through the port.

One module per kind, each a handler that returns an Outcome or raises Refused or Cancelled
(outcome.py); `runner.run_operation` begins, keeps the operation alive, dispatches by kind and
reports its end, once, whatever happens.
"""
