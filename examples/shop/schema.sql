-- The shop's tables, in the schema "shop" that database: true gives the website (owned by its
-- own role, the search_path of its DATABASE_URL).
CREATE TABLE shop.products (
  id          serial PRIMARY KEY,
  name        text NOT NULL UNIQUE,
  price_cents integer NOT NULL CHECK (price_cents >= 0)
);
CREATE TABLE shop.orders (
  id         serial PRIMARY KEY,
  product_id integer NOT NULL REFERENCES shop.products (id),
  quantity   integer NOT NULL CHECK (quantity > 0),
  created    timestamptz NOT NULL DEFAULT now()
);
