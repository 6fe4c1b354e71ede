UPDATE ferry_event SET replays = replays + 1 WHERE id = :id
