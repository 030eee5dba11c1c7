-- The claim without the over-limit move (one UPDATE, no CTE pair): what the move costs.
SET synchronous_commit = off;
WITH next AS (
    SELECT id FROM bus_messages
    WHERE queue = 'q' AND visible_at <= now()
    ORDER BY visible_at, id LIMIT :batch FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE bus_messages m
    SET visible_at = now() + 30000 * interval '1 millisecond', receive_count = m.receive_count + 1,
        receipt = nextval('bus_receipts')
    FROM next WHERE m.id = next.id
    RETURNING m.id, m.receipt
)
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(receipt), '{}') AS receipts FROM taken \gset
DELETE FROM bus_messages m USING unnest(:ids::int8[], :receipts::int8[]) AS d (id, receipt)
WHERE m.id = d.id AND m.receipt = d.receipt;
