-- Archived items (internal/store/catalogue.go): an archived product or
-- coupon batch leaves its table for one of these, in the transaction that
-- archives it, so that every statement of every stage, which reads the
-- item by id from its table, finds no such item (buyers get 404) without
-- a condition of its own. Its orders (or grabs) stay where they are, under
-- the same id; an archived id is not given to a new item (a PUT of it is
-- refused 409 archived), so they never mix with another item's.
-- archived_at: when it was archived, by the database's clock.
CREATE TABLE IF NOT EXISTS archived_products (
  id            BIGINT       NOT NULL,
  name          VARCHAR(128) NOT NULL,
  price_cents   BIGINT       NOT NULL,
  initial_stock INT          NOT NULL,
  stock         INT          NOT NULL,
  opens_at      DATETIME(6)  NULL DEFAULT NULL,
  closes_at     DATETIME(6)  NULL DEFAULT NULL,
  archived_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS archived_coupon_batches (
  id          BIGINT       NOT NULL,
  name        VARCHAR(128) NOT NULL,
  total       INT          NOT NULL,
  remaining   INT          NOT NULL,
  opens_at    DATETIME(6)  NULL DEFAULT NULL,
  closes_at   DATETIME(6)  NULL DEFAULT NULL,
  archived_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
