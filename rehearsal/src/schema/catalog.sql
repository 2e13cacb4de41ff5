-- Every object of one schema ($1, 'awa'), one row each: its kind, its
-- qualified name, and the definition two equal schemas share. Catalogs
-- only, one statement; the order of columns in a table (attnum) is left
-- out, because ADD COLUMN appends where a fresh CREATE TABLE lists.
WITH ns AS (SELECT oid, nspname FROM pg_namespace WHERE nspname = $1)
SELECT 'table' AS kind,
       ns.nspname || '.' || c.relname AS name,
       concat_ws(' ',
                 CASE c.relkind WHEN 'p' THEN 'partitioned by ' || pg_get_partkeydef(c.oid) ELSE 'table' END,
                 CASE WHEN c.relispartition
                      THEN 'partition of ' || i.inhparent::regclass::text || ' ' || pg_get_expr(c.relpartbound, c.oid) END,
                 CASE c.relpersistence WHEN 'u' THEN 'unlogged' END) AS definition
FROM pg_class c
JOIN ns ON c.relnamespace = ns.oid
LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND c.relispartition
WHERE c.relkind IN ('r', 'p')
UNION ALL
SELECT 'column',
       ns.nspname || '.' || c.relname || '.' || a.attname,
       concat_ws(' ',
                 format_type(a.atttypid, a.atttypmod),
                 CASE WHEN a.attnotnull THEN 'not null' END,
                 CASE WHEN a.attidentity <> '' THEN 'identity ' || a.attidentity::text END,
                 CASE WHEN a.attgenerated <> '' THEN 'generated' END,
                 CASE WHEN d.adbin IS NOT NULL THEN 'default ' || pg_get_expr(d.adbin, d.adrelid) END)
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN ns ON c.relnamespace = ns.oid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index', ns.nspname || '.' || ci.relname, pg_get_indexdef(x.indexrelid)
FROM pg_index x
JOIN pg_class ci ON ci.oid = x.indexrelid
JOIN ns ON ci.relnamespace = ns.oid
UNION ALL
SELECT 'constraint',
       ns.nspname || '.' || c.relname || '.' || k.conname,
       pg_get_constraintdef(k.oid)
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN ns ON c.relnamespace = ns.oid
UNION ALL
SELECT 'trigger',
       ns.nspname || '.' || c.relname || '.' || g.tgname,
       pg_get_triggerdef(g.oid) || CASE g.tgenabled
                                     WHEN 'D' THEN ' [disabled]'
                                     WHEN 'O' THEN ' [enabled]'
                                     WHEN 'R' THEN ' [enabled on replicas only]'
                                     ELSE ' [enabled always]' END
FROM pg_trigger g
JOIN pg_class c ON c.oid = g.tgrelid
JOIN ns ON c.relnamespace = ns.oid
WHERE NOT g.tgisinternal
UNION ALL
SELECT 'function',
       ns.nspname || '.' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       pg_get_functiondef(p.oid)
FROM pg_proc p
JOIN ns ON p.pronamespace = ns.oid
WHERE p.prokind IN ('f', 'p')
UNION ALL
SELECT 'sequence',
       ns.nspname || '.' || c.relname,
       format('%s start %s increment %s min %s max %s cache %s%s',
              format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax,
              s.seqcache, CASE WHEN s.seqcycle THEN ' cycle' ELSE '' END)
FROM pg_sequence s
JOIN pg_class c ON c.oid = s.seqrelid
JOIN ns ON c.relnamespace = ns.oid
ORDER BY 1, 2
