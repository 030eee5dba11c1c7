-- The claim with a random receipt instead of a sequence: what nextval costs.

SET synchronous_commit = off;
WITH next AS (
    SELECT id, receive_count FROM bus_messages
    WHERE queue = 'q' AND visible_at <= now()
    ORDER BY visible_at, id LIMIT :batch FOR UPDATE SKIP LOCKED
), over AS (
    UPDATE bus_messages m
    SET queue = 'q_dead_letter', dead_letter_reason = 'over', visible_at = now(), receive_count = 0, receipt = 0
    FROM next WHERE m.id = next.id AND 5 > 0 AND next.receive_count >= 5
    RETURNING m.id
), taken AS (
    UPDATE bus_messages m
    SET visible_at = now() + 30000 * interval '1 millisecond', receive_count = m.receive_count + 1,
        receipt = (random() * 9e18)::int8
    FROM next WHERE m.id = next.id AND NOT (5 > 0 AND next.receive_count >= 5)
    RETURNING m.id, m.receipt
)
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(receipt), '{}') AS receipts FROM taken \gset
DELETE FROM bus_messages m USING unnest(:ids::int8[], :receipts::int8[]) AS d (id, receipt)
WHERE m.id = d.id AND m.receipt = d.receipt;
