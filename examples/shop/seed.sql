-- The catalogue a fresh shop starts with.
INSERT INTO shop.products (name, price_cents) VALUES
  ('Blue mug', 1200),
  ('Notebook', 450),
  ('Desk lamp', 3900);
