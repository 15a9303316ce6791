-- Users the host deleted (DELETE /v1/users/{id}, issue 27): an old inbox
-- token or a /p link from an earlier email must not bring the user back as
-- a bare recipient row by saving a preference. Only the id and when: the
-- send log keeps the id too, so nothing is held that was not held already.
-- A host's PUT /v1/users/{id} (describing the user again) removes the row.
CREATE TABLE engagement_erased_users (
    user_id   VARCHAR(255) NOT NULL PRIMARY KEY,
    erased_at BIGINT       NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
