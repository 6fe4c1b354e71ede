-- Records an operator's action on an event in the action ledger.
INSERT INTO ferry_action (event_id, at, action, actor)
VALUES (:id, :now, :action, :actor)
