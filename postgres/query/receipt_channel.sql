-- The NOTIFY channel receipts in this connection's schema are announced on.
SELECT ferry_receipt_channel();
