-- seckill schema for MySQL 8.0.16+ and MariaDB 10.11 (both enforce CHECK).
-- Applied by `seckill migrate`, at `serve` start, and by the MySQL container
-- of docker-compose.yml. Every statement is idempotent.
--
-- Stock columns are signed on purpose: a guarded decrement that would go below
-- zero must hit the CHECK constraint (error 3819 on MySQL, 4025 on MariaDB),
-- not an unsigned range error. The CHECK is the last line of defence; it
-- cannot catch a lost update, which writes a non-negative but wrong value.
--
-- There is no foreign key from orders to products on purpose: InnoDB would
-- take a shared lock on the product row for every order insert, and the
-- following stock UPDATE in the same transaction would then deadlock with
-- other buyers holding the same shared lock.

CREATE TABLE IF NOT EXISTS products (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  name          VARCHAR(128) NOT NULL,
  price_cents   BIGINT       NOT NULL DEFAULT 0,
  initial_stock INT          NOT NULL,
  stock         INT          NOT NULL,
  fence_token   BIGINT       NOT NULL DEFAULT 0,
  created_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  CONSTRAINT products_stock_non_negative CHECK (stock >= 0),
  CONSTRAINT products_initial_non_negative CHECK (initial_stock >= 0),
  CONSTRAINT products_price_non_negative CHECK (price_cents >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS orders (
  id          BIGINT      NOT NULL AUTO_INCREMENT,
  order_no    VARCHAR(40) NOT NULL,
  product_id  BIGINT      NOT NULL,
  user_id     VARCHAR(64) NOT NULL,
  quantity    INT         NOT NULL,
  stage       VARCHAR(32) NOT NULL,
  instance    VARCHAR(64) NOT NULL DEFAULT '',
  created_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY orders_order_no (order_no),
  UNIQUE KEY orders_one_per_user (product_id, user_id),
  CONSTRAINT orders_quantity_positive CHECK (quantity > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS coupon_batches (
  id          BIGINT       NOT NULL AUTO_INCREMENT,
  name        VARCHAR(128) NOT NULL,
  total       INT          NOT NULL,
  remaining   INT          NOT NULL,
  fence_token BIGINT       NOT NULL DEFAULT 0,
  created_at  DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at  DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  CONSTRAINT coupon_batches_remaining_non_negative CHECK (remaining >= 0),
  CONSTRAINT coupon_batches_total_non_negative CHECK (total >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS coupon_grabs (
  id          BIGINT      NOT NULL AUTO_INCREMENT,
  grab_no     VARCHAR(40) NOT NULL,
  batch_id    BIGINT      NOT NULL,
  user_id     VARCHAR(64) NOT NULL,
  quantity    INT         NOT NULL DEFAULT 1,
  stage       VARCHAR(32) NOT NULL,
  instance    VARCHAR(64) NOT NULL DEFAULT '',
  created_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY coupon_grabs_grab_no (grab_no),
  UNIQUE KEY coupon_grabs_one_per_user (batch_id, user_id),
  CONSTRAINT coupon_grabs_quantity_one CHECK (quantity = 1)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
