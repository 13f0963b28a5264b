-- Demo data: one hot product and one coupon batch. Existing rows are kept.
INSERT IGNORE INTO products (id, name, price_cents, initial_stock, stock) VALUES
  (1, 'Flash-sale phone', 199900, 100, 100),
  (2, 'Limited sneakers', 89900, 50, 50);
INSERT IGNORE INTO coupon_batches (id, name, total, remaining) VALUES
  (1, '100 off 500', 100, 100);
