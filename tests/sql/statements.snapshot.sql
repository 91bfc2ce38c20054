-- Every SQL statement d1saver sends, exactly as sent (d1saver/sql/catalogue.py,
-- made ready by d1saver/sql/query.py). Generated: do not edit; regenerate with
--     PYTHONPATH=$PWD python -m tests.sql.test_statements --update
-- and review the difference with the change that caused it.

-- name: SCHEMA[0]
CREATE TABLE IF NOT EXISTS d1saver_schema(version INTEGER PRIMARY KEY,applied_at TEXT NOT NULL,min_reader INTEGER NOT NULL DEFAULT 1)

-- name: SCHEMA[1]
CREATE TABLE IF NOT EXISTS d1saver_guards(head_moved INTEGER CONSTRAINT head_moved CHECK(head_moved IS NULL),lease_lost INTEGER CONSTRAINT lease_lost CHECK(lease_lost IS NULL),schema_outdated INTEGER CONSTRAINT schema_outdated CHECK(schema_outdated IS NULL),schema_too_new INTEGER CONSTRAINT schema_too_new CHECK(schema_too_new IS NULL))

-- name: SCHEMA[2]
INSERT INTO d1saver_guards(schema_outdated)SELECT 1 WHERE(SELECT MAX(version)FROM d1saver_schema)<16

-- name: SCHEMA[3]
INSERT INTO d1saver_guards(schema_too_new)SELECT 1 WHERE(SELECT MAX(min_reader)FROM d1saver_schema)>16

-- name: SCHEMA[4]
CREATE TABLE IF NOT EXISTS checkpoints(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL DEFAULT '',checkpoint_id TEXT NOT NULL,parent_checkpoint_id TEXT,type TEXT,checkpoint TEXT NOT NULL,metadata TEXT NOT NULL DEFAULT '{}',channels TEXT NOT NULL DEFAULT '[]',run_id TEXT,ts TEXT,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id))

-- name: SCHEMA[5]
CREATE INDEX IF NOT EXISTS checkpoints_run_id ON checkpoints(run_id)

-- name: SCHEMA[6]
CREATE INDEX IF NOT EXISTS checkpoints_by_id ON checkpoints(checkpoint_id,thread_id,checkpoint_ns)

-- name: SCHEMA[7]
CREATE TABLE IF NOT EXISTS writes(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL DEFAULT '',checkpoint_id TEXT NOT NULL,task_id TEXT NOT NULL,task_path TEXT NOT NULL DEFAULT '',idx INTEGER NOT NULL,channel TEXT NOT NULL,type TEXT,value TEXT,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id,task_id,idx))

-- name: SCHEMA[8]
CREATE TABLE IF NOT EXISTS chunks(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL DEFAULT '',checkpoint_id TEXT NOT NULL,owner TEXT NOT NULL,seq INTEGER NOT NULL,data TEXT NOT NULL,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id,owner,seq))

-- name: SCHEMA[9]
CREATE TRIGGER IF NOT EXISTS checkpoints_own_chunks AFTER INSERT ON checkpoints BEGIN DELETE FROM chunks WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND owner IN('',':metadata'); END

-- name: SCHEMA[10]
CREATE TRIGGER IF NOT EXISTS writes_own_chunks AFTER INSERT ON writes BEGIN DELETE FROM chunks WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND owner=NEW.task_id||'/'||NEW.idx; END

-- name: SCHEMA[11]
CREATE TABLE IF NOT EXISTS tags(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL DEFAULT '',checkpoint_id TEXT NOT NULL,name TEXT NOT NULL,created_at TEXT NOT NULL,PRIMARY KEY(thread_id,checkpoint_ns,name))

-- name: SCHEMA[12]
CREATE INDEX IF NOT EXISTS tags_checkpoint ON tags(thread_id,checkpoint_ns,checkpoint_id)

-- name: SCHEMA[13]
CREATE TABLE IF NOT EXISTS leases(name TEXT PRIMARY KEY,holder TEXT NOT NULL,expires_at INTEGER NOT NULL)

-- name: SCHEMA[14]
CREATE TABLE IF NOT EXISTS d1saver_scope(thread_id TEXT PRIMARY KEY)

-- name: SCHEMA[15]
CREATE TABLE IF NOT EXISTS d1saver_keep(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL,checkpoint_id TEXT NOT NULL,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id))

-- name: SCHEMA[16]
CREATE TABLE IF NOT EXISTS d1saver_relink(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL,checkpoint_id TEXT NOT NULL,new_parent TEXT,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id))

-- name: SCHEMA[17]
CREATE TABLE IF NOT EXISTS d1saver_ops(op_id TEXT PRIMARY KEY,result TEXT NOT NULL,created_at INTEGER NOT NULL)

-- name: SCHEMA[18]
CREATE INDEX IF NOT EXISTS d1saver_ops_created ON d1saver_ops(created_at)

-- name: SCHEMA[19]
CREATE TABLE IF NOT EXISTS delta_unwritten(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL,checkpoint_id TEXT NOT NULL,channels TEXT NOT NULL,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id))

-- name: SCHEMA[20]
CREATE TRIGGER IF NOT EXISTS delta_unwritten_on_put AFTER INSERT ON checkpoints BEGIN DELETE FROM delta_unwritten WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id; END

-- name: SCHEMA[21]
CREATE TRIGGER IF NOT EXISTS delta_unwritten_on_delete AFTER DELETE ON checkpoints BEGIN DELETE FROM delta_unwritten WHERE thread_id=OLD.thread_id AND checkpoint_ns=OLD.checkpoint_ns AND checkpoint_id=OLD.checkpoint_id; END

-- name: SCHEMA[22]
CREATE TABLE IF NOT EXISTS delta_frozen(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL,checkpoint_id TEXT NOT NULL,channel TEXT NOT NULL,kind TEXT NOT NULL,depth INTEGER NOT NULL,task_id TEXT NOT NULL,idx INTEGER NOT NULL,src_checkpoint_id TEXT NOT NULL,task_path TEXT NOT NULL DEFAULT '',type TEXT,value TEXT,metadata TEXT,channels TEXT,parent TEXT,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx))

-- name: SCHEMA[23]
CREATE TRIGGER IF NOT EXISTS delta_frozen_on_delete AFTER DELETE ON checkpoints BEGIN DELETE FROM delta_frozen WHERE thread_id=OLD.thread_id AND checkpoint_ns=OLD.checkpoint_ns AND checkpoint_id=OLD.checkpoint_id; END

-- name: SCHEMA[24]
CREATE TRIGGER IF NOT EXISTS delta_frozen_bound AFTER INSERT ON checkpoints WHEN EXISTS(SELECT 1 FROM delta_frozen f WHERE f.thread_id=NEW.thread_id AND f.checkpoint_ns=NEW.checkpoint_ns AND f.checkpoint_id=NEW.checkpoint_id)BEGIN UPDATE checkpoints SET parent_checkpoint_id=(SELECT f.parent FROM delta_frozen f WHERE f.thread_id=NEW.thread_id AND f.checkpoint_ns=NEW.checkpoint_ns AND f.checkpoint_id=NEW.checkpoint_id LIMIT 1)WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND NEW.parent_checkpoint_id IS NOT NULL AND NOT EXISTS(SELECT 1 FROM checkpoints p WHERE p.thread_id=NEW.thread_id AND p.checkpoint_ns=NEW.checkpoint_ns AND p.checkpoint_id=NEW.parent_checkpoint_id); DELETE FROM delta_frozen WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND parent IS NOT(SELECT c.parent_checkpoint_id FROM checkpoints c WHERE c.thread_id=NEW.thread_id AND c.checkpoint_ns=NEW.checkpoint_ns AND c.checkpoint_id=NEW.checkpoint_id); DELETE FROM chunks WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND substr(owner,1,2)='f/' AND NOT EXISTS(SELECT 1 FROM delta_frozen f WHERE f.thread_id=NEW.thread_id AND f.checkpoint_ns=NEW.checkpoint_ns AND f.checkpoint_id=NEW.checkpoint_id); END

-- name: SCHEMA[25]
CREATE TABLE IF NOT EXISTS d1saver_compaction_runs(run_id TEXT NOT NULL,database_id TEXT NOT NULL,trigger TEXT NOT NULL,started_at TEXT NOT NULL,ended_at TEXT,status TEXT NOT NULL,reason TEXT,keep INTEGER,max_age_days INTEGER,threads_scanned INTEGER NOT NULL DEFAULT 0,threads_compacted INTEGER NOT NULL DEFAULT 0,threads_expired INTEGER NOT NULL DEFAULT 0,checkpoints_deleted INTEGER NOT NULL DEFAULT 0,writes_deleted INTEGER NOT NULL DEFAULT 0,bytes_freed INTEGER NOT NULL DEFAULT 0,batches INTEGER NOT NULL DEFAULT 0,PRIMARY KEY(run_id,database_id))

-- name: SCHEMA[26]
CREATE INDEX IF NOT EXISTS d1saver_compaction_runs_started ON d1saver_compaction_runs(started_at)

-- name: SCHEMA[27]
CREATE TABLE IF NOT EXISTS d1saver_compaction_cursor(name TEXT PRIMARY KEY,after TEXT NOT NULL,run_id TEXT NOT NULL,updated_at TEXT NOT NULL)

-- name: SCHEMA[28]
CREATE TABLE IF NOT EXISTS d1saver_guard(head_moved INTEGER CONSTRAINT head_moved CHECK(head_moved IS NULL),lease_lost INTEGER CONSTRAINT lease_lost CHECK(lease_lost IS NULL))

-- name: SCHEMA[29]
CREATE TABLE IF NOT EXISTS d1saver_chunks(thread_id TEXT NOT NULL,id TEXT NOT NULL,level INTEGER NOT NULL,data TEXT NOT NULL,PRIMARY KEY(thread_id,id))WITHOUT ROWID

-- name: SCHEMA[30]
CREATE TRIGGER IF NOT EXISTS d1saver_chunks_closed AFTER INSERT ON d1saver_chunks WHEN NEW.level>0 BEGIN SELECT RAISE(ABORT,'d1saver chunk_missing')WHERE EXISTS(SELECT 1 FROM json_each('["'||replace(NEW.data,',','","')||'"]')j WHERE NOT EXISTS(SELECT 1 FROM d1saver_chunks k WHERE k.thread_id=NEW.thread_id AND k.id=ltrim(j.value,'^'))); END

-- name: SCHEMA[31]
CREATE TRIGGER IF NOT EXISTS checkpoints_chunks_closed AFTER INSERT ON checkpoints WHEN substr(NEW.checkpoint,1,2)='m:' BEGIN SELECT RAISE(ABORT,'d1saver chunk_missing')WHERE EXISTS(SELECT 1 FROM json_each('["'||replace(substr(NEW.checkpoint,3),',','","')||'"]')j WHERE instr(j.value,':')=0 AND NOT EXISTS(SELECT 1 FROM d1saver_chunks k WHERE k.thread_id=NEW.thread_id AND k.id=ltrim(j.value,'^'))); END

-- name: SCHEMA[32]
CREATE TRIGGER IF NOT EXISTS writes_chunks_closed AFTER INSERT ON writes WHEN substr(NEW.value,1,2)='m:' BEGIN SELECT RAISE(ABORT,'d1saver chunk_missing')WHERE EXISTS(SELECT 1 FROM json_each('["'||replace(substr(NEW.value,3),',','","')||'"]')j WHERE instr(j.value,':')=0 AND NOT EXISTS(SELECT 1 FROM d1saver_chunks k WHERE k.thread_id=NEW.thread_id AND k.id=ltrim(j.value,'^'))); END

-- name: SCHEMA[33]
CREATE VIEW IF NOT EXISTS d1saver_put(thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts,chunks)AS SELECT NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL WHERE 0

-- name: SCHEMA[34]
CREATE TRIGGER IF NOT EXISTS d1saver_put_row INSTEAD OF INSERT ON d1saver_put BEGIN INSERT OR IGNORE INTO d1saver_chunks(thread_id,id,level,data)SELECT NEW.thread_id,value->>0,value->>1,value->>2 FROM json_each(NEW.chunks); INSERT OR REPLACE INTO checkpoints(thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts)VALUES(NEW.thread_id,NEW.checkpoint_ns,NEW.checkpoint_id,NEW.parent_checkpoint_id,COALESCE(NEW.type,'msgpack'),NEW.checkpoint,NEW.metadata,NEW.channels,NEW.run_id,NEW.ts); END

-- name: SCHEMA[35]
CREATE VIEW IF NOT EXISTS d1saver_put_writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,special,regular,chunks)AS SELECT NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL WHERE 0

-- name: SCHEMA[36]
CREATE TRIGGER IF NOT EXISTS d1saver_put_writes_rows INSTEAD OF INSERT ON d1saver_put_writes BEGIN INSERT OR IGNORE INTO d1saver_chunks(thread_id,id,level,data)SELECT NEW.thread_id,value->>0,value->>1,value->>2 FROM json_each(NEW.chunks); INSERT OR REPLACE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT NEW.thread_id,NEW.checkpoint_ns,NEW.checkpoint_id,NEW.task_id,NEW.task_path,value->>0,value->>1,COALESCE(value->>2,'msgpack'),value->>3 FROM json_each(NEW.special); INSERT OR IGNORE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT NEW.thread_id,NEW.checkpoint_ns,NEW.checkpoint_id,NEW.task_id,NEW.task_path,json_extract(NEW.regular,'$[0][0]'),'','pack','p:'||NEW.regular WHERE json_array_length(NEW.regular)>1 AND NOT EXISTS(SELECT 1 FROM writes WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND task_id=NEW.task_id AND idx>=0); INSERT OR IGNORE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT NEW.thread_id,NEW.checkpoint_ns,NEW.checkpoint_id,NEW.task_id,NEW.task_path,j.value->>0,j.value->>1,COALESCE(j.value->>2,'msgpack'),j.value->>3 FROM json_each(NEW.regular)j WHERE NOT EXISTS(SELECT 1 FROM writes p,json_each(CASE WHEN substr(p.value,1,2)='p:' THEN substr(p.value,3)ELSE '[]' END)q WHERE p.thread_id=NEW.thread_id AND p.checkpoint_ns=NEW.checkpoint_ns AND p.checkpoint_id=NEW.checkpoint_id AND p.task_id=NEW.task_id AND q.value->>0=j.value->>0); END

-- name: SCHEMA[37]
CREATE TRIGGER IF NOT EXISTS writes_pack_chunks_closed AFTER INSERT ON writes WHEN substr(NEW.value,1,2)='p:' BEGIN SELECT RAISE(ABORT,'d1saver chunk_missing')WHERE EXISTS(SELECT 1 FROM json_each(substr(NEW.value,3))w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 AND NOT EXISTS(SELECT 1 FROM d1saver_chunks k WHERE k.thread_id=NEW.thread_id AND k.id=ltrim(j.value,'^'))); END

-- name: SCHEMA[38]
CREATE TABLE IF NOT EXISTS store_items(ns TEXT NOT NULL,key TEXT NOT NULL,value TEXT NOT NULL,created_at REAL NOT NULL,updated_at REAL NOT NULL,expires_at REAL,ttl_minutes REAL,PRIMARY KEY(ns,key))

-- name: SCHEMA[39]
CREATE INDEX IF NOT EXISTS store_items_expires ON store_items(expires_at)WHERE expires_at IS NOT NULL

-- name: SCHEMA[40]
CREATE TABLE IF NOT EXISTS store_vectors(ns TEXT NOT NULL,key TEXT NOT NULL,field TEXT NOT NULL,vector TEXT NOT NULL,code TEXT,PRIMARY KEY(ns,key,field))

-- name: SCHEMA[41]
CREATE TABLE IF NOT EXISTS cache_entries(ns TEXT NOT NULL,key TEXT NOT NULL,value TEXT NOT NULL,expires_at REAL,PRIMARY KEY(ns,key))

-- name: SCHEMA[42]
CREATE INDEX IF NOT EXISTS cache_entries_expires ON cache_entries(expires_at)WHERE expires_at IS NOT NULL

-- name: SCHEMA[43]
CREATE TABLE IF NOT EXISTS d1saver_moves(thread_id TEXT PRIMARY KEY,move_id TEXT NOT NULL,created_at INTEGER NOT NULL)

-- name: SCHEMA[44]
CREATE TABLE IF NOT EXISTS d1saver_staged(staging_id TEXT PRIMARY KEY,thread_id TEXT NOT NULL,source_id TEXT NOT NULL,created_at INTEGER NOT NULL,expires_at INTEGER NOT NULL)

-- name: SCHEMA[45]
CREATE INDEX IF NOT EXISTS d1saver_staged_thread ON d1saver_staged(thread_id)

-- name: SCHEMA[46]
CREATE INDEX IF NOT EXISTS d1saver_staged_source ON d1saver_staged(source_id)

-- name: SCHEMA[47]
CREATE TRIGGER IF NOT EXISTS d1saver_staged_removed AFTER DELETE ON d1saver_staged BEGIN DELETE FROM writes WHERE thread_id=OLD.staging_id; DELETE FROM d1saver_chunks WHERE thread_id=OLD.staging_id; DELETE FROM chunks WHERE thread_id=OLD.staging_id; DELETE FROM tags WHERE thread_id=OLD.staging_id; DELETE FROM checkpoints WHERE thread_id=OLD.staging_id; END

-- name: SCHEMA[48]
CREATE TABLE IF NOT EXISTS d1saver_staged_elsewhere(source_id TEXT NOT NULL,database_id TEXT NOT NULL,staging_id TEXT NOT NULL,expires_at INTEGER NOT NULL,PRIMARY KEY(source_id,database_id,staging_id))

-- name: SCHEMA[49]
CREATE TABLE IF NOT EXISTS d1saver_move_guards(move_voided INTEGER CONSTRAINT move_voided CHECK(move_voided IS NULL),staging_lost INTEGER CONSTRAINT staging_lost CHECK(staging_lost IS NULL))

-- name: SCHEMA[50]
CREATE TABLE IF NOT EXISTS d1saver_gc_pending(thread_id TEXT PRIMARY KEY)

-- name: SCHEMA[51]
CREATE TRIGGER IF NOT EXISTS checkpoints_gc_pending BEFORE INSERT ON checkpoints WHEN EXISTS(SELECT 1 FROM checkpoints WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND substr(checkpoint,1,2)='m:' AND checkpoint IS NOT NEW.checkpoint)BEGIN INSERT OR IGNORE INTO d1saver_gc_pending(thread_id)VALUES(NEW.thread_id); END

-- name: SCHEMA[52]
CREATE TRIGGER IF NOT EXISTS writes_gc_pending BEFORE INSERT ON writes WHEN EXISTS(SELECT 1 FROM writes WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND task_id=NEW.task_id AND idx=NEW.idx AND substr(value,1,2)IN('m:','p:')AND value IS NOT NEW.value)BEGIN INSERT OR IGNORE INTO d1saver_gc_pending(thread_id)VALUES(NEW.thread_id); END

-- name: SCHEMA[53]
INSERT OR IGNORE INTO d1saver_schema(version,applied_at,min_reader)VALUES(16,strftime('%Y-%m-%dT%H:%M:%SZ','now'),15)

-- name: READ_SCHEMA
SELECT * FROM d1saver_schema

-- name: CLAIM_VERSION
-- params: ?1 version
INSERT INTO d1saver_schema(version,applied_at)VALUES(?,strftime('%Y-%m-%dT%H:%M:%SZ','now'))

-- name: SET_MIN_READER
-- params: ?1 min_reader, ?2 version
UPDATE d1saver_schema SET min_reader=? WHERE version=?

-- name: UPSERT_CHECKPOINT
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 parent_checkpoint_id, ?5 type, ?6 checkpoint, ?7 metadata, ?8 channels, ?9 run_id, ?10 ts
INSERT OR REPLACE INTO checkpoints(thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts)VALUES(?,?,?,?,?,?,?,?,?,?)

-- name: PUT
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 parent_checkpoint_id, ?5 type, ?6 checkpoint, ?7 metadata, ?8 channels, ?9 run_id, ?10 ts, ?11 chunks
INSERT INTO d1saver_put VALUES(?,?,?,?,?,?,?,?,?,?,?)

-- name: PUT_WRITES
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 task_id, ?5 task_path, ?6 special, ?7 regular, ?8 chunks
INSERT INTO d1saver_put_writes VALUES(?,?,?,?,?,?,?,?)

-- name: INSERT_CHUNKS
-- params: ?1 thread_id, ?2 chunks
INSERT OR IGNORE INTO d1saver_chunks(thread_id,id,level,data)SELECT ?,value->>0,value->>1,value->>2 FROM json_each(?)

-- name: GUARD_HEAD
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 parent_checkpoint_id, ?4 checkpoint_id
INSERT INTO d1saver_guards(head_moved)SELECT 1 FROM(SELECT checkpoint_id FROM checkpoints WHERE thread_id=? AND checkpoint_ns=? ORDER BY checkpoint_id DESC LIMIT 1)head WHERE head.checkpoint_id IS NOT ? AND head.checkpoint_id IS NOT ?

-- name: INSERT_WRITES_REPLACE
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 task_id, ?5 task_path, ?6 writes
INSERT OR REPLACE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT ?,?,?,?,?,value->>0,value->>1,value->>2,value->>3 FROM json_each(?)

-- name: INSERT_WRITES_IGNORE
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 task_id, ?5 task_path, ?6 writes
INSERT OR IGNORE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT ?,?,?,?,?,j.value->>0,j.value->>1,j.value->>2,j.value->>3 FROM json_each(?)j WHERE NOT EXISTS(SELECT 1 FROM writes p,json_each(CASE WHEN substr(p.value,1,2)='p:' THEN substr(p.value,3)ELSE '[]' END)q WHERE p.thread_id=?1 AND p.checkpoint_ns=?2 AND p.checkpoint_id=?3 AND p.task_id=?4 AND q.value->>0=j.value->>0)

-- name: DELETE_CHUNKS_OF
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 owner
DELETE FROM chunks WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=? AND owner=?

-- name: INSERT_CHUNK
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 owner, ?5 seq, ?6 data
INSERT OR REPLACE INTO chunks(thread_id,checkpoint_ns,checkpoint_id,owner,seq,data)VALUES(?,?,?,?,?,?)

-- name: INSERT_WRITE_CHUNK
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 owner, ?5 seq, ?6 data, ?7 task_id, ?8 idx, ?9 value
INSERT OR IGNORE INTO chunks(thread_id,checkpoint_ns,checkpoint_id,owner,seq,data)SELECT ?,?,?,?,?,? WHERE EXISTS(SELECT 1 FROM writes WHERE thread_id=?1 AND checkpoint_ns=?2 AND checkpoint_id=?3 AND task_id=? AND idx=? AND value=?)

-- name: PUT_UNWRITTEN
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 channels
INSERT OR REPLACE INTO delta_unwritten(thread_id,checkpoint_ns,checkpoint_id,channels)VALUES(?,?,?,?)

-- name: SELECT_PAGE_THREAD_NS
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 after_checkpoint_id, ?4 before, ?5 checkpoint_id, ?6 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id<COALESCE(?,?,x'')AND(? IS NULL OR checkpoint_id=?5)ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),out AS(SELECT 'c' kind,thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id ref,metadata,NULL task_path,NULL idx,channels,type,checkpoint value FROM page UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM page p CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE NOT substr(k.owner,1,2)='f/'),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('c','w')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id))GROUP BY thread_id,part

-- name: SELECT_PAGE_THREAD
-- params: ?1 thread_id, ?2 after_checkpoint_id, ?3 before, ?4 after_thread_id, ?5 after_checkpoint_ns, ?6 checkpoint_id, ?7 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE thread_id=? AND(checkpoint_id,thread_id,checkpoint_ns)<(COALESCE(?,?,x''),COALESCE(?,''),COALESCE(?,''))AND(? IS NULL OR checkpoint_id=?6)ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),out AS(SELECT 'c' kind,thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id ref,metadata,NULL task_path,NULL idx,channels,type,checkpoint value FROM page UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM page p CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE NOT substr(k.owner,1,2)='f/'),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('c','w')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id))GROUP BY thread_id,part

-- name: SELECT_PAGE_ALL
-- params: ?1 after_checkpoint_id, ?2 before, ?3 after_thread_id, ?4 after_checkpoint_ns, ?5 checkpoint_id, ?6 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE(checkpoint_id,thread_id,checkpoint_ns)<(COALESCE(?,?,x''),COALESCE(?,''),COALESCE(?,''))AND substr(thread_id,1,9)<>char(31)||'d1saver-' AND(? IS NULL OR checkpoint_id=?5)ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),out AS(SELECT 'c' kind,thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id ref,metadata,NULL task_path,NULL idx,channels,type,checkpoint value FROM page UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM page p CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE NOT substr(k.owner,1,2)='f/'),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('c','w')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id))GROUP BY thread_id,part

-- name: SELECT_PAGE_THREAD_NS_FILTERED
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 after_checkpoint_id, ?4 before, ?5 checkpoint_id, ?6 filter, ?7 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id<COALESCE(?,?,x'')AND(? IS NULL OR checkpoint_id=?5)AND NOT EXISTS(SELECT 1 FROM(SELECT value ->>0 path,value ->>1 doc FROM json_each(?))f WHERE NOT(CASE WHEN json_type(f.doc,f.path)='null' THEN COALESCE(json_type(c.metadata,f.path),'null')='null' ELSE(SELECT COUNT(*)FROM json_tree(c.metadata,f.path))=(SELECT COUNT(*)FROM json_tree(f.doc,f.path))AND NOT EXISTS(SELECT 1 FROM json_tree(f.doc,f.path)q WHERE NOT EXISTS(SELECT 1 FROM json_tree(c.metadata,f.path)m WHERE m.fullkey=q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN('integer','real','true','false')THEN 'n' ELSE m.type END=CASE WHEN q.type IN('integer','real','true','false')THEN 'n' ELSE q.type END))END OR(json_type(c.metadata,f.path)IS NULL AND json_type(c.metadata,'$."d1saver:metadata"')IS NOT NULL)))ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),out AS(SELECT 'c' kind,thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id ref,metadata,NULL task_path,NULL idx,channels,type,checkpoint value FROM page UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM page p CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE NOT substr(k.owner,1,2)='f/'),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('c','w')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id))GROUP BY thread_id,part

-- name: SELECT_PAGE_THREAD_FILTERED
-- params: ?1 thread_id, ?2 after_checkpoint_id, ?3 before, ?4 after_thread_id, ?5 after_checkpoint_ns, ?6 checkpoint_id, ?7 filter, ?8 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE thread_id=? AND(checkpoint_id,thread_id,checkpoint_ns)<(COALESCE(?,?,x''),COALESCE(?,''),COALESCE(?,''))AND(? IS NULL OR checkpoint_id=?6)AND NOT EXISTS(SELECT 1 FROM(SELECT value ->>0 path,value ->>1 doc FROM json_each(?))f WHERE NOT(CASE WHEN json_type(f.doc,f.path)='null' THEN COALESCE(json_type(c.metadata,f.path),'null')='null' ELSE(SELECT COUNT(*)FROM json_tree(c.metadata,f.path))=(SELECT COUNT(*)FROM json_tree(f.doc,f.path))AND NOT EXISTS(SELECT 1 FROM json_tree(f.doc,f.path)q WHERE NOT EXISTS(SELECT 1 FROM json_tree(c.metadata,f.path)m WHERE m.fullkey=q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN('integer','real','true','false')THEN 'n' ELSE m.type END=CASE WHEN q.type IN('integer','real','true','false')THEN 'n' ELSE q.type END))END OR(json_type(c.metadata,f.path)IS NULL AND json_type(c.metadata,'$."d1saver:metadata"')IS NOT NULL)))ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),out AS(SELECT 'c' kind,thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id ref,metadata,NULL task_path,NULL idx,channels,type,checkpoint value FROM page UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM page p CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE NOT substr(k.owner,1,2)='f/'),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('c','w')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id))GROUP BY thread_id,part

-- name: SELECT_PAGE_ALL_FILTERED
-- params: ?1 after_checkpoint_id, ?2 before, ?3 after_thread_id, ?4 after_checkpoint_ns, ?5 checkpoint_id, ?6 filter, ?7 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE(checkpoint_id,thread_id,checkpoint_ns)<(COALESCE(?,?,x''),COALESCE(?,''),COALESCE(?,''))AND substr(thread_id,1,9)<>char(31)||'d1saver-' AND(? IS NULL OR checkpoint_id=?5)AND NOT EXISTS(SELECT 1 FROM(SELECT value ->>0 path,value ->>1 doc FROM json_each(?))f WHERE NOT(CASE WHEN json_type(f.doc,f.path)='null' THEN COALESCE(json_type(c.metadata,f.path),'null')='null' ELSE(SELECT COUNT(*)FROM json_tree(c.metadata,f.path))=(SELECT COUNT(*)FROM json_tree(f.doc,f.path))AND NOT EXISTS(SELECT 1 FROM json_tree(f.doc,f.path)q WHERE NOT EXISTS(SELECT 1 FROM json_tree(c.metadata,f.path)m WHERE m.fullkey=q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN('integer','real','true','false')THEN 'n' ELSE m.type END=CASE WHEN q.type IN('integer','real','true','false')THEN 'n' ELSE q.type END))END OR(json_type(c.metadata,f.path)IS NULL AND json_type(c.metadata,'$."d1saver:metadata"')IS NOT NULL)))ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),out AS(SELECT 'c' kind,thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id ref,metadata,NULL task_path,NULL idx,channels,type,checkpoint value FROM page UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM page p CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE NOT substr(k.owner,1,2)='f/'),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('c','w')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id))GROUP BY thread_id,part

-- name: SELECT_PAGE_DELTA_THREAD_NS
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 after_checkpoint_id, ?4 before, ?5 checkpoint_id, ?6 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id<COALESCE(?,?,x'')AND(? IS NULL OR checkpoint_id=?5)ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),walk(thread_id,checkpoint_ns,checkpoint_id,sought)AS(SELECT p.thread_id,p.checkpoint_ns,p.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(d.key)FROM json_each(p.metadata,'$.counters_since_delta_snapshot')d WHERE d.key NOT IN(SELECT value FROM json_each(p.channels))AND d.key NOT IN(SELECT u.value FROM delta_unwritten x,json_each(x.channels)u WHERE x.thread_id=p.thread_id AND x.checkpoint_ns=p.checkpoint_ns AND x.checkpoint_id=p.checkpoint_id)))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=p.thread_id AND f.checkpoint_ns=p.checkpoint_ns AND f.checkpoint_id=p.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM page p UNION SELECT c.thread_id,c.checkpoint_ns,c.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(s.value)FROM json_each(w.sought)s WHERE s.value NOT IN(SELECT value FROM json_each(c.channels))))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM walk w JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)WHERE json_array_length(w.sought)>0),visited AS(SELECT thread_id,checkpoint_ns,checkpoint_id,json_group_array(DISTINCT s.value)sought FROM walk,json_each(walk.sought)s WHERE checkpoint_id IS NOT NULL GROUP BY thread_id,checkpoint_ns,checkpoint_id),holders AS(SELECT thread_id,checkpoint_ns,checkpoint_id,sought FROM visited UNION ALL SELECT thread_id,checkpoint_ns,checkpoint_id,NULL FROM page),out AS(SELECT 'a' kind,thread_id,checkpoint_ns,checkpoint_id,c.parent_checkpoint_id ref,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.metadata END metadata,NULL task_path,NULL idx,c.channels channels,c.type type,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.checkpoint END value FROM visited v JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM visited v CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)WHERE(w.channel IN(SELECT value FROM json_each(v.sought))OR substr(w.value,1,2)='p:')UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM holders v CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NOT NULL OR substr(k.owner,1,2)='f/' UNION ALL SELECT 'f',thread_id,checkpoint_ns,checkpoint_id,json_array(f.kind,f.src_checkpoint_id,f.task_id,f.task_path,f.idx,f.channel,f.depth),f.metadata,NULL,NULL,f.channels,f.type,f.value FROM holders v CROSS JOIN delta_frozen f USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NULL OR f.channel IN(SELECT value FROM json_each(v.sought))),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('a','w','f')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0),page_out(thread_id,v)AS(SELECT thread_id,checkpoint FROM page UNION ALL SELECT thread_id,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)),seen(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM seen r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)WHERE NOT EXISTS(SELECT 1 FROM seen s WHERE s.thread_id=r.thread_id AND s.id=r.id))GROUP BY thread_id,part

-- name: SELECT_PAGE_DELTA_THREAD
-- params: ?1 thread_id, ?2 after_checkpoint_id, ?3 before, ?4 after_thread_id, ?5 after_checkpoint_ns, ?6 checkpoint_id, ?7 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE thread_id=? AND(checkpoint_id,thread_id,checkpoint_ns)<(COALESCE(?,?,x''),COALESCE(?,''),COALESCE(?,''))AND(? IS NULL OR checkpoint_id=?6)ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),walk(thread_id,checkpoint_ns,checkpoint_id,sought)AS(SELECT p.thread_id,p.checkpoint_ns,p.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(d.key)FROM json_each(p.metadata,'$.counters_since_delta_snapshot')d WHERE d.key NOT IN(SELECT value FROM json_each(p.channels))AND d.key NOT IN(SELECT u.value FROM delta_unwritten x,json_each(x.channels)u WHERE x.thread_id=p.thread_id AND x.checkpoint_ns=p.checkpoint_ns AND x.checkpoint_id=p.checkpoint_id)))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=p.thread_id AND f.checkpoint_ns=p.checkpoint_ns AND f.checkpoint_id=p.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM page p UNION SELECT c.thread_id,c.checkpoint_ns,c.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(s.value)FROM json_each(w.sought)s WHERE s.value NOT IN(SELECT value FROM json_each(c.channels))))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM walk w JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)WHERE json_array_length(w.sought)>0),visited AS(SELECT thread_id,checkpoint_ns,checkpoint_id,json_group_array(DISTINCT s.value)sought FROM walk,json_each(walk.sought)s WHERE checkpoint_id IS NOT NULL GROUP BY thread_id,checkpoint_ns,checkpoint_id),holders AS(SELECT thread_id,checkpoint_ns,checkpoint_id,sought FROM visited UNION ALL SELECT thread_id,checkpoint_ns,checkpoint_id,NULL FROM page),out AS(SELECT 'a' kind,thread_id,checkpoint_ns,checkpoint_id,c.parent_checkpoint_id ref,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.metadata END metadata,NULL task_path,NULL idx,c.channels channels,c.type type,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.checkpoint END value FROM visited v JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM visited v CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)WHERE(w.channel IN(SELECT value FROM json_each(v.sought))OR substr(w.value,1,2)='p:')UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM holders v CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NOT NULL OR substr(k.owner,1,2)='f/' UNION ALL SELECT 'f',thread_id,checkpoint_ns,checkpoint_id,json_array(f.kind,f.src_checkpoint_id,f.task_id,f.task_path,f.idx,f.channel,f.depth),f.metadata,NULL,NULL,f.channels,f.type,f.value FROM holders v CROSS JOIN delta_frozen f USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NULL OR f.channel IN(SELECT value FROM json_each(v.sought))),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('a','w','f')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0),page_out(thread_id,v)AS(SELECT thread_id,checkpoint FROM page UNION ALL SELECT thread_id,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)),seen(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM seen r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)WHERE NOT EXISTS(SELECT 1 FROM seen s WHERE s.thread_id=r.thread_id AND s.id=r.id))GROUP BY thread_id,part

-- name: SELECT_PAGE_DELTA_ALL
-- params: ?1 after_checkpoint_id, ?2 before, ?3 after_thread_id, ?4 after_checkpoint_ns, ?5 checkpoint_id, ?6 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE(checkpoint_id,thread_id,checkpoint_ns)<(COALESCE(?,?,x''),COALESCE(?,''),COALESCE(?,''))AND substr(thread_id,1,9)<>char(31)||'d1saver-' AND(? IS NULL OR checkpoint_id=?5)ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),walk(thread_id,checkpoint_ns,checkpoint_id,sought)AS(SELECT p.thread_id,p.checkpoint_ns,p.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(d.key)FROM json_each(p.metadata,'$.counters_since_delta_snapshot')d WHERE d.key NOT IN(SELECT value FROM json_each(p.channels))AND d.key NOT IN(SELECT u.value FROM delta_unwritten x,json_each(x.channels)u WHERE x.thread_id=p.thread_id AND x.checkpoint_ns=p.checkpoint_ns AND x.checkpoint_id=p.checkpoint_id)))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=p.thread_id AND f.checkpoint_ns=p.checkpoint_ns AND f.checkpoint_id=p.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM page p UNION SELECT c.thread_id,c.checkpoint_ns,c.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(s.value)FROM json_each(w.sought)s WHERE s.value NOT IN(SELECT value FROM json_each(c.channels))))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM walk w JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)WHERE json_array_length(w.sought)>0),visited AS(SELECT thread_id,checkpoint_ns,checkpoint_id,json_group_array(DISTINCT s.value)sought FROM walk,json_each(walk.sought)s WHERE checkpoint_id IS NOT NULL GROUP BY thread_id,checkpoint_ns,checkpoint_id),holders AS(SELECT thread_id,checkpoint_ns,checkpoint_id,sought FROM visited UNION ALL SELECT thread_id,checkpoint_ns,checkpoint_id,NULL FROM page),out AS(SELECT 'a' kind,thread_id,checkpoint_ns,checkpoint_id,c.parent_checkpoint_id ref,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.metadata END metadata,NULL task_path,NULL idx,c.channels channels,c.type type,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.checkpoint END value FROM visited v JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM visited v CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)WHERE(w.channel IN(SELECT value FROM json_each(v.sought))OR substr(w.value,1,2)='p:')UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM holders v CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NOT NULL OR substr(k.owner,1,2)='f/' UNION ALL SELECT 'f',thread_id,checkpoint_ns,checkpoint_id,json_array(f.kind,f.src_checkpoint_id,f.task_id,f.task_path,f.idx,f.channel,f.depth),f.metadata,NULL,NULL,f.channels,f.type,f.value FROM holders v CROSS JOIN delta_frozen f USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NULL OR f.channel IN(SELECT value FROM json_each(v.sought))),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('a','w','f')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0),page_out(thread_id,v)AS(SELECT thread_id,checkpoint FROM page UNION ALL SELECT thread_id,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)),seen(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM seen r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)WHERE NOT EXISTS(SELECT 1 FROM seen s WHERE s.thread_id=r.thread_id AND s.id=r.id))GROUP BY thread_id,part

-- name: SELECT_PAGE_DELTA_THREAD_NS_FILTERED
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 after_checkpoint_id, ?4 before, ?5 checkpoint_id, ?6 filter, ?7 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id<COALESCE(?,?,x'')AND(? IS NULL OR checkpoint_id=?5)AND NOT EXISTS(SELECT 1 FROM(SELECT value ->>0 path,value ->>1 doc FROM json_each(?))f WHERE NOT(CASE WHEN json_type(f.doc,f.path)='null' THEN COALESCE(json_type(c.metadata,f.path),'null')='null' ELSE(SELECT COUNT(*)FROM json_tree(c.metadata,f.path))=(SELECT COUNT(*)FROM json_tree(f.doc,f.path))AND NOT EXISTS(SELECT 1 FROM json_tree(f.doc,f.path)q WHERE NOT EXISTS(SELECT 1 FROM json_tree(c.metadata,f.path)m WHERE m.fullkey=q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN('integer','real','true','false')THEN 'n' ELSE m.type END=CASE WHEN q.type IN('integer','real','true','false')THEN 'n' ELSE q.type END))END OR(json_type(c.metadata,f.path)IS NULL AND json_type(c.metadata,'$."d1saver:metadata"')IS NOT NULL)))ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),walk(thread_id,checkpoint_ns,checkpoint_id,sought)AS(SELECT p.thread_id,p.checkpoint_ns,p.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(d.key)FROM json_each(p.metadata,'$.counters_since_delta_snapshot')d WHERE d.key NOT IN(SELECT value FROM json_each(p.channels))AND d.key NOT IN(SELECT u.value FROM delta_unwritten x,json_each(x.channels)u WHERE x.thread_id=p.thread_id AND x.checkpoint_ns=p.checkpoint_ns AND x.checkpoint_id=p.checkpoint_id)))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=p.thread_id AND f.checkpoint_ns=p.checkpoint_ns AND f.checkpoint_id=p.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM page p UNION SELECT c.thread_id,c.checkpoint_ns,c.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(s.value)FROM json_each(w.sought)s WHERE s.value NOT IN(SELECT value FROM json_each(c.channels))))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM walk w JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)WHERE json_array_length(w.sought)>0),visited AS(SELECT thread_id,checkpoint_ns,checkpoint_id,json_group_array(DISTINCT s.value)sought FROM walk,json_each(walk.sought)s WHERE checkpoint_id IS NOT NULL GROUP BY thread_id,checkpoint_ns,checkpoint_id),holders AS(SELECT thread_id,checkpoint_ns,checkpoint_id,sought FROM visited UNION ALL SELECT thread_id,checkpoint_ns,checkpoint_id,NULL FROM page),out AS(SELECT 'a' kind,thread_id,checkpoint_ns,checkpoint_id,c.parent_checkpoint_id ref,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.metadata END metadata,NULL task_path,NULL idx,c.channels channels,c.type type,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.checkpoint END value FROM visited v JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM visited v CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)WHERE(w.channel IN(SELECT value FROM json_each(v.sought))OR substr(w.value,1,2)='p:')UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM holders v CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NOT NULL OR substr(k.owner,1,2)='f/' UNION ALL SELECT 'f',thread_id,checkpoint_ns,checkpoint_id,json_array(f.kind,f.src_checkpoint_id,f.task_id,f.task_path,f.idx,f.channel,f.depth),f.metadata,NULL,NULL,f.channels,f.type,f.value FROM holders v CROSS JOIN delta_frozen f USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NULL OR f.channel IN(SELECT value FROM json_each(v.sought))),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('a','w','f')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0),page_out(thread_id,v)AS(SELECT thread_id,checkpoint FROM page UNION ALL SELECT thread_id,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)),seen(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM seen r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)WHERE NOT EXISTS(SELECT 1 FROM seen s WHERE s.thread_id=r.thread_id AND s.id=r.id))GROUP BY thread_id,part

-- name: SELECT_PAGE_DELTA_THREAD_FILTERED
-- params: ?1 thread_id, ?2 after_checkpoint_id, ?3 before, ?4 after_thread_id, ?5 after_checkpoint_ns, ?6 checkpoint_id, ?7 filter, ?8 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE thread_id=? AND(checkpoint_id,thread_id,checkpoint_ns)<(COALESCE(?,?,x''),COALESCE(?,''),COALESCE(?,''))AND(? IS NULL OR checkpoint_id=?6)AND NOT EXISTS(SELECT 1 FROM(SELECT value ->>0 path,value ->>1 doc FROM json_each(?))f WHERE NOT(CASE WHEN json_type(f.doc,f.path)='null' THEN COALESCE(json_type(c.metadata,f.path),'null')='null' ELSE(SELECT COUNT(*)FROM json_tree(c.metadata,f.path))=(SELECT COUNT(*)FROM json_tree(f.doc,f.path))AND NOT EXISTS(SELECT 1 FROM json_tree(f.doc,f.path)q WHERE NOT EXISTS(SELECT 1 FROM json_tree(c.metadata,f.path)m WHERE m.fullkey=q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN('integer','real','true','false')THEN 'n' ELSE m.type END=CASE WHEN q.type IN('integer','real','true','false')THEN 'n' ELSE q.type END))END OR(json_type(c.metadata,f.path)IS NULL AND json_type(c.metadata,'$."d1saver:metadata"')IS NOT NULL)))ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),walk(thread_id,checkpoint_ns,checkpoint_id,sought)AS(SELECT p.thread_id,p.checkpoint_ns,p.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(d.key)FROM json_each(p.metadata,'$.counters_since_delta_snapshot')d WHERE d.key NOT IN(SELECT value FROM json_each(p.channels))AND d.key NOT IN(SELECT u.value FROM delta_unwritten x,json_each(x.channels)u WHERE x.thread_id=p.thread_id AND x.checkpoint_ns=p.checkpoint_ns AND x.checkpoint_id=p.checkpoint_id)))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=p.thread_id AND f.checkpoint_ns=p.checkpoint_ns AND f.checkpoint_id=p.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM page p UNION SELECT c.thread_id,c.checkpoint_ns,c.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(s.value)FROM json_each(w.sought)s WHERE s.value NOT IN(SELECT value FROM json_each(c.channels))))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM walk w JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)WHERE json_array_length(w.sought)>0),visited AS(SELECT thread_id,checkpoint_ns,checkpoint_id,json_group_array(DISTINCT s.value)sought FROM walk,json_each(walk.sought)s WHERE checkpoint_id IS NOT NULL GROUP BY thread_id,checkpoint_ns,checkpoint_id),holders AS(SELECT thread_id,checkpoint_ns,checkpoint_id,sought FROM visited UNION ALL SELECT thread_id,checkpoint_ns,checkpoint_id,NULL FROM page),out AS(SELECT 'a' kind,thread_id,checkpoint_ns,checkpoint_id,c.parent_checkpoint_id ref,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.metadata END metadata,NULL task_path,NULL idx,c.channels channels,c.type type,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.checkpoint END value FROM visited v JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM visited v CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)WHERE(w.channel IN(SELECT value FROM json_each(v.sought))OR substr(w.value,1,2)='p:')UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM holders v CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NOT NULL OR substr(k.owner,1,2)='f/' UNION ALL SELECT 'f',thread_id,checkpoint_ns,checkpoint_id,json_array(f.kind,f.src_checkpoint_id,f.task_id,f.task_path,f.idx,f.channel,f.depth),f.metadata,NULL,NULL,f.channels,f.type,f.value FROM holders v CROSS JOIN delta_frozen f USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NULL OR f.channel IN(SELECT value FROM json_each(v.sought))),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('a','w','f')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0),page_out(thread_id,v)AS(SELECT thread_id,checkpoint FROM page UNION ALL SELECT thread_id,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)),seen(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM seen r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)WHERE NOT EXISTS(SELECT 1 FROM seen s WHERE s.thread_id=r.thread_id AND s.id=r.id))GROUP BY thread_id,part

-- name: SELECT_PAGE_DELTA_ALL_FILTERED
-- params: ?1 after_checkpoint_id, ?2 before, ?3 after_thread_id, ?4 after_checkpoint_ns, ?5 checkpoint_id, ?6 filter, ?7 limit
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels FROM checkpoints c WHERE(checkpoint_id,thread_id,checkpoint_ns)<(COALESCE(?,?,x''),COALESCE(?,''),COALESCE(?,''))AND substr(thread_id,1,9)<>char(31)||'d1saver-' AND(? IS NULL OR checkpoint_id=?5)AND NOT EXISTS(SELECT 1 FROM(SELECT value ->>0 path,value ->>1 doc FROM json_each(?))f WHERE NOT(CASE WHEN json_type(f.doc,f.path)='null' THEN COALESCE(json_type(c.metadata,f.path),'null')='null' ELSE(SELECT COUNT(*)FROM json_tree(c.metadata,f.path))=(SELECT COUNT(*)FROM json_tree(f.doc,f.path))AND NOT EXISTS(SELECT 1 FROM json_tree(f.doc,f.path)q WHERE NOT EXISTS(SELECT 1 FROM json_tree(c.metadata,f.path)m WHERE m.fullkey=q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN('integer','real','true','false')THEN 'n' ELSE m.type END=CASE WHEN q.type IN('integer','real','true','false')THEN 'n' ELSE q.type END))END OR(json_type(c.metadata,f.path)IS NULL AND json_type(c.metadata,'$."d1saver:metadata"')IS NOT NULL)))ORDER BY checkpoint_id DESC,thread_id DESC,checkpoint_ns DESC LIMIT ?),walk(thread_id,checkpoint_ns,checkpoint_id,sought)AS(SELECT p.thread_id,p.checkpoint_ns,p.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(d.key)FROM json_each(p.metadata,'$.counters_since_delta_snapshot')d WHERE d.key NOT IN(SELECT value FROM json_each(p.channels))AND d.key NOT IN(SELECT u.value FROM delta_unwritten x,json_each(x.channels)u WHERE x.thread_id=p.thread_id AND x.checkpoint_ns=p.checkpoint_ns AND x.checkpoint_id=p.checkpoint_id)))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=p.thread_id AND f.checkpoint_ns=p.checkpoint_ns AND f.checkpoint_id=p.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM page p UNION SELECT c.thread_id,c.checkpoint_ns,c.parent_checkpoint_id,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(s.value)FROM json_each(w.sought)s WHERE s.value NOT IN(SELECT value FROM json_each(c.channels))))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM walk w JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)WHERE json_array_length(w.sought)>0),visited AS(SELECT thread_id,checkpoint_ns,checkpoint_id,json_group_array(DISTINCT s.value)sought FROM walk,json_each(walk.sought)s WHERE checkpoint_id IS NOT NULL GROUP BY thread_id,checkpoint_ns,checkpoint_id),holders AS(SELECT thread_id,checkpoint_ns,checkpoint_id,sought FROM visited UNION ALL SELECT thread_id,checkpoint_ns,checkpoint_id,NULL FROM page),out AS(SELECT 'a' kind,thread_id,checkpoint_ns,checkpoint_id,c.parent_checkpoint_id ref,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.metadata END metadata,NULL task_path,NULL idx,c.channels channels,c.type type,CASE WHEN EXISTS(SELECT 1 FROM json_each(v.sought)s WHERE s.value IN(SELECT value FROM json_each(c.channels)))THEN c.checkpoint END value FROM visited v JOIN checkpoints c USING(thread_id,checkpoint_ns,checkpoint_id)UNION ALL SELECT 'w',thread_id,checkpoint_ns,checkpoint_id,w.task_id,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM visited v CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)WHERE(w.channel IN(SELECT value FROM json_each(v.sought))OR substr(w.value,1,2)='p:')UNION ALL SELECT 'k',thread_id,checkpoint_ns,checkpoint_id,k.owner,NULL,NULL,k.seq,NULL,NULL,k.data FROM holders v CROSS JOIN chunks k USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NOT NULL OR substr(k.owner,1,2)='f/' UNION ALL SELECT 'f',thread_id,checkpoint_ns,checkpoint_id,json_array(f.kind,f.src_checkpoint_id,f.task_id,f.task_path,f.idx,f.channel,f.depth),f.metadata,NULL,NULL,f.channels,f.type,f.value FROM holders v CROSS JOIN delta_frozen f USING(thread_id,checkpoint_ns,checkpoint_id)WHERE v.sought IS NULL OR f.channel IN(SELECT value FROM json_each(v.sought))),vals(thread_id,v)AS(SELECT thread_id,CASE WHEN kind IN('a','w','f')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0),page_out(thread_id,v)AS(SELECT thread_id,checkpoint FROM page UNION ALL SELECT thread_id,w.value FROM page p CROSS JOIN writes w USING(thread_id,checkpoint_ns,checkpoint_id)),seen(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM page_out o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM seen r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)WHERE NOT EXISTS(SELECT 1 FROM seen s WHERE s.thread_id=r.thread_id AND s.id=r.id))GROUP BY thread_id,part

-- name: DELTA_HISTORY
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 channels
WITH RECURSIVE target AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id FROM checkpoints WHERE thread_id=? AND checkpoint_ns=? AND(? IS NULL OR checkpoint_id=?3)ORDER BY checkpoint_id DESC LIMIT 1),chain(checkpoint_id,depth,sought)AS(SELECT t.parent_checkpoint_id,1,(SELECT json_group_array(s.value)FROM json_each(json(?))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=t.thread_id AND f.checkpoint_ns=t.checkpoint_ns AND f.checkpoint_id=t.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM target t UNION ALL SELECT p.parent_checkpoint_id,chain.depth + 1,(SELECT json_group_array(s.value)FROM json_each((SELECT json_group_array(s.value)FROM json_each(chain.sought)s WHERE s.value NOT IN(SELECT value FROM json_each(p.channels))))s WHERE s.value NOT IN(SELECT f.channel FROM delta_frozen f WHERE f.thread_id=p.thread_id AND f.checkpoint_ns=p.checkpoint_ns AND f.checkpoint_id=p.checkpoint_id GROUP BY f.channel HAVING SUM(f.kind='c')=0))FROM chain JOIN checkpoints p ON p.thread_id=?1 AND p.checkpoint_ns=?2 AND p.checkpoint_id=chain.checkpoint_id WHERE json_array_length(chain.sought)>0 AND chain.depth<20000),ancestors AS(SELECT chain.depth,chain.sought,p.checkpoint_id,p.channels,p.type,p.checkpoint,p.metadata FROM chain JOIN checkpoints p ON p.thread_id=?1 AND p.checkpoint_ns=?2 AND p.checkpoint_id=chain.checkpoint_id WHERE json_array_length(chain.sought)>0),holders AS(SELECT 0 depth,json(?4)sought,t.checkpoint_id,'[]' channels FROM target t UNION ALL SELECT depth,sought,checkpoint_id,channels FROM ancestors),out AS(SELECT 'a' kind,a.depth depth,a.checkpoint_id checkpoint_id,NULL ref,a.sought sought,CASE WHEN EXISTS(SELECT 1 FROM json_each(a.sought)s WHERE s.value IN(SELECT value FROM json_each(a.channels)))THEN a.metadata END metadata,NULL task_path,NULL idx,a.channels channels,a.type type,CASE WHEN EXISTS(SELECT 1 FROM json_each(a.sought)s WHERE s.value IN(SELECT value FROM json_each(a.channels)))THEN a.checkpoint END value FROM ancestors a UNION ALL SELECT 'w',a.depth,w.checkpoint_id,w.task_id,NULL,NULL,w.task_path,w.idx,w.channel,w.type,w.value FROM ancestors a JOIN writes w ON w.thread_id=?1 AND w.checkpoint_ns=?2 AND w.checkpoint_id=a.checkpoint_id WHERE(w.channel IN(SELECT value FROM json_each(a.sought))OR substr(w.value,1,2)='p:')UNION ALL SELECT 'f',h.depth,h.checkpoint_id,json_array(f.kind,f.src_checkpoint_id,f.task_id,f.task_path,f.idx,f.channel,f.depth),NULL,f.metadata,NULL,NULL,f.channels,f.type,f.value FROM holders h JOIN delta_frozen f ON f.thread_id=?1 AND f.checkpoint_ns=?2 AND f.checkpoint_id=h.checkpoint_id WHERE f.channel IN(SELECT value FROM json_each(h.sought))AND f.channel NOT IN(SELECT value FROM json_each(h.channels))UNION ALL SELECT 'k',h.depth,k.checkpoint_id,k.owner,NULL,NULL,NULL,k.seq,NULL,NULL,k.data FROM holders h JOIN chunks k ON k.thread_id=?1 AND k.checkpoint_ns=?2 AND k.checkpoint_id=h.checkpoint_id WHERE h.depth>0 OR substr(k.owner,1,2)='f/'),vals(thread_id,v)AS(SELECT ?1,CASE WHEN kind IN('a','w','f')THEN value END FROM out),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT * FROM out UNION ALL SELECT 'h',NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,group_concat(id||' '||data,' ')FROM(SELECT r.thread_id,r.id,k.data,sum(length(k.data)+ 30)OVER(ROWS UNBOUNDED PRECEDING)/ 1000000 part FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id))GROUP BY thread_id,part

-- name: FORGET_OLD_OPS
DELETE FROM d1saver_ops WHERE created_at<CAST(strftime('%s','now')AS INTEGER)- 86400

-- name: OP_RESULT
-- params: ?1 op_id
SELECT result FROM d1saver_ops WHERE op_id=?

-- name: TAG
-- params: ?1 name, ?2 thread_id, ?3 checkpoint_ns, ?4 checkpoint_id
INSERT INTO tags(thread_id,checkpoint_ns,checkpoint_id,name,created_at)SELECT thread_id,checkpoint_ns,checkpoint_id,?,strftime('%Y-%m-%dT%H:%M:%SZ','now')FROM checkpoints WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=COALESCE(?,(SELECT MAX(checkpoint_id)FROM checkpoints WHERE thread_id=?2 AND checkpoint_ns=?3))ON CONFLICT(thread_id,checkpoint_ns,name)DO UPDATE SET checkpoint_id=excluded.checkpoint_id,created_at=excluded.created_at RETURNING checkpoint_id

-- name: UNTAG
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 name
DELETE FROM tags WHERE thread_id=? AND checkpoint_ns=? AND name=?

-- name: RECORD_UNTAG
-- params: ?1 op_id, ?2 thread_id, ?3 checkpoint_ns, ?4 name
INSERT OR IGNORE INTO d1saver_ops(op_id,result,created_at)SELECT ?,COUNT(*),CAST(strftime('%s','now')AS INTEGER)FROM tags WHERE thread_id=? AND checkpoint_ns=? AND name=?

-- name: LIST_TAGS
-- params: ?1 thread_id, ?2 checkpoint_ns
SELECT name,checkpoint_id FROM tags WHERE thread_id=? AND checkpoint_ns=? ORDER BY checkpoint_id DESC,name

-- name: GC_CHUNKS
WITH RECURSIVE reached(thread_id,id)AS(SELECT c.thread_id,ltrim(j.value,'^')FROM checkpoints c,json_each(CASE WHEN substr(c.checkpoint,1,2)='m:' THEN '["'||replace(substr(c.checkpoint,3),',','","')||'"]' ELSE '[]' END)j WHERE c.thread_id IN(SELECT thread_id FROM d1saver_scope)AND instr(j.value,':')=0 UNION SELECT w.thread_id,ltrim(j.value,'^')FROM writes w,json_each(CASE WHEN substr(w.value,1,2)='m:' THEN '["'||replace(substr(w.value,3),',','","')||'"]' ELSE '[]' END)j WHERE w.thread_id IN(SELECT thread_id FROM d1saver_scope)AND instr(j.value,':')=0 UNION SELECT w.thread_id,ltrim(j.value,'^')FROM writes w,json_each(CASE WHEN substr(w.value,1,2)='p:' THEN substr(w.value,3)ELSE '[]' END)p,json_each(CASE WHEN substr(p.value->>3,1,2)='m:' THEN '["'||replace(substr(p.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE w.thread_id IN(SELECT thread_id FROM d1saver_scope)AND instr(j.value,':')=0 UNION SELECT f.thread_id,ltrim(j.value,'^')FROM delta_frozen f,json_each(CASE WHEN substr(f.value,1,2)='m:' THEN '["'||replace(substr(f.value,3),',','","')||'"]' ELSE '[]' END)j WHERE f.thread_id IN(SELECT thread_id FROM d1saver_scope)AND instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM reached r CROSS JOIN d1saver_chunks n ON n.thread_id=r.thread_id AND n.id=r.id AND n.level>0,json_each('["'||replace(n.data,',','","')||'"]')j)DELETE FROM d1saver_chunks WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)AND(thread_id,id)NOT IN(SELECT thread_id,id FROM reached)

-- name: CHUNK_CHECK
-- params: ?1 thread_id
WITH RECURSIVE reached(thread_id,id)AS(SELECT c.thread_id,ltrim(j.value,'^')FROM checkpoints c,json_each(CASE WHEN substr(c.checkpoint,1,2)='m:' THEN '["'||replace(substr(c.checkpoint,3),',','","')||'"]' ELSE '[]' END)j WHERE c.thread_id IN(SELECT thread_id FROM checkpoints WHERE ? IS NULL OR thread_id=?1 UNION SELECT thread_id FROM writes WHERE ?1 IS NULL OR thread_id=?1)AND instr(j.value,':')=0 UNION SELECT w.thread_id,ltrim(j.value,'^')FROM writes w,json_each(CASE WHEN substr(w.value,1,2)='m:' THEN '["'||replace(substr(w.value,3),',','","')||'"]' ELSE '[]' END)j WHERE w.thread_id IN(SELECT thread_id FROM checkpoints WHERE ?1 IS NULL OR thread_id=?1 UNION SELECT thread_id FROM writes WHERE ?1 IS NULL OR thread_id=?1)AND instr(j.value,':')=0 UNION SELECT w.thread_id,ltrim(j.value,'^')FROM writes w,json_each(CASE WHEN substr(w.value,1,2)='p:' THEN substr(w.value,3)ELSE '[]' END)p,json_each(CASE WHEN substr(p.value->>3,1,2)='m:' THEN '["'||replace(substr(p.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE w.thread_id IN(SELECT thread_id FROM checkpoints WHERE ?1 IS NULL OR thread_id=?1 UNION SELECT thread_id FROM writes WHERE ?1 IS NULL OR thread_id=?1)AND instr(j.value,':')=0 UNION SELECT f.thread_id,ltrim(j.value,'^')FROM delta_frozen f,json_each(CASE WHEN substr(f.value,1,2)='m:' THEN '["'||replace(substr(f.value,3),',','","')||'"]' ELSE '[]' END)j WHERE f.thread_id IN(SELECT thread_id FROM checkpoints WHERE ?1 IS NULL OR thread_id=?1 UNION SELECT thread_id FROM writes WHERE ?1 IS NULL OR thread_id=?1)AND instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM reached r CROSS JOIN d1saver_chunks n ON n.thread_id=r.thread_id AND n.id=r.id AND n.level>0,json_each('["'||replace(n.data,',','","')||'"]')j),scoped AS(SELECT thread_id FROM reached UNION SELECT thread_id FROM d1saver_chunks WHERE ?1 IS NULL OR thread_id=?1),counted AS(SELECT t.thread_id,(SELECT COUNT(*)FROM reached r WHERE r.thread_id=t.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_chunks k WHERE k.thread_id=r.thread_id AND k.id=r.id))missing,(SELECT COUNT(*)FROM d1saver_chunks k WHERE k.thread_id=t.thread_id AND NOT EXISTS(SELECT 1 FROM reached r WHERE r.thread_id=k.thread_id AND r.id=k.id))unreferenced FROM scoped t)SELECT thread_id,missing,unreferenced FROM counted WHERE missing>0 OR unreferenced>0 ORDER BY thread_id

-- name: DELETE_THREADS_WRITES
-- params: ?1 thread_ids
DELETE FROM writes WHERE thread_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))

-- name: DELETE_THREADS_D1SAVER_CHUNKS
-- params: ?1 thread_ids
DELETE FROM d1saver_chunks WHERE thread_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))

-- name: DELETE_THREADS_CHUNKS
-- params: ?1 thread_ids
DELETE FROM chunks WHERE thread_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))

-- name: DELETE_THREADS_TAGS
-- params: ?1 thread_ids
DELETE FROM tags WHERE thread_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))

-- name: DELETE_THREADS_CHECKPOINTS
-- params: ?1 thread_ids
DELETE FROM checkpoints WHERE thread_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))

-- name: DELETE_THREADS_MOVES
-- params: ?1 thread_ids
DELETE FROM d1saver_moves WHERE thread_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))

-- name: DELETE_THREADS_STAGED
-- params: ?1 thread_ids
DELETE FROM d1saver_staged WHERE thread_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))OR source_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?1))OR staging_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?1))

-- name: DELETE_THREADS_STAGED_ELSEWHERE
-- params: ?1 thread_ids
DELETE FROM d1saver_staged_elsewhere WHERE source_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))RETURNING database_id,staging_id

-- name: UNPACK_TARGET_PIECES
-- params: ?1 target, ?2 source
DELETE FROM chunks WHERE thread_id=? AND EXISTS(SELECT 1 FROM writes t WHERE t.thread_id=?1 AND t.checkpoint_ns=chunks.checkpoint_ns AND t.checkpoint_id=chunks.checkpoint_id AND chunks.owner=t.task_id||'/'||t.idx AND EXISTS(SELECT 1 FROM writes s CROSS JOIN json_each(CASE WHEN substr(s.value,1,2)='p:' THEN substr(s.value,3)ELSE json_array(json_array(s.idx))END)q WHERE s.thread_id=? AND s.checkpoint_ns=t.checkpoint_ns AND s.checkpoint_id=t.checkpoint_id AND s.task_id=t.task_id AND q.value->>0=t.idx))

-- name: UNPACK_TARGET_PACKS
-- params: ?1 target, ?2 source
INSERT OR REPLACE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT t.thread_id,t.checkpoint_ns,t.checkpoint_id,t.task_id,t.task_path,e.value->>0,e.value->>1,COALESCE(e.value->>2,'msgpack'),e.value->>3 FROM writes t CROSS JOIN json_each(substr(t.value,3))e WHERE t.thread_id=? AND substr(t.value,1,2)='p:' AND EXISTS(SELECT 1 FROM writes s WHERE s.thread_id=? AND s.checkpoint_ns=t.checkpoint_ns AND s.checkpoint_id=t.checkpoint_id AND s.task_id=t.task_id)AND NOT EXISTS(SELECT 1 FROM writes s CROSS JOIN json_each(CASE WHEN substr(s.value,1,2)='p:' THEN substr(s.value,3)ELSE json_array(json_array(s.idx))END)q WHERE s.thread_id=?2 AND s.checkpoint_ns=t.checkpoint_ns AND s.checkpoint_id=t.checkpoint_id AND s.task_id=t.task_id AND q.value->>0=e.value->>0)

-- name: UNPACK_TARGET_DROP
-- params: ?1 target, ?2 source
DELETE FROM writes AS t WHERE t.thread_id=? AND EXISTS(SELECT 1 FROM writes s WHERE s.thread_id=? AND s.checkpoint_ns=t.checkpoint_ns AND s.checkpoint_id=t.checkpoint_id AND s.task_id=t.task_id)AND(substr(t.value,1,2)='p:' OR EXISTS(SELECT 1 FROM writes s CROSS JOIN json_each(CASE WHEN substr(s.value,1,2)='p:' THEN substr(s.value,3)ELSE json_array(json_array(s.idx))END)q WHERE s.thread_id=?2 AND s.checkpoint_ns=t.checkpoint_ns AND s.checkpoint_id=t.checkpoint_id AND s.task_id=t.task_id AND q.value->>0=t.idx))

-- name: COPY_D1SAVER_CHUNKS
-- params: ?1 target, ?2 source
INSERT OR IGNORE INTO d1saver_chunks(thread_id,id,level,data)SELECT ?,id,level,data FROM d1saver_chunks WHERE thread_id=? ORDER BY level

-- name: COPY_CHECKPOINTS
-- params: ?1 target, ?2 source
INSERT OR REPLACE INTO checkpoints(thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts)SELECT ?,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts FROM checkpoints WHERE thread_id=? ORDER BY checkpoint_ns,checkpoint_id

-- name: COPY_WRITES
-- params: ?1 target, ?2 source
INSERT OR REPLACE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT ?,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value FROM writes WHERE thread_id=?

-- name: COPY_CHUNKS
-- params: ?1 target, ?2 source
INSERT OR REPLACE INTO chunks(thread_id,checkpoint_ns,checkpoint_id,owner,seq,data)SELECT ?,checkpoint_ns,checkpoint_id,owner,seq,data FROM chunks WHERE thread_id=?

-- name: COPY_TAGS
-- params: ?1 target, ?2 source
INSERT OR REPLACE INTO tags(thread_id,checkpoint_ns,checkpoint_id,name,created_at)SELECT ?,checkpoint_ns,checkpoint_id,name,created_at FROM tags WHERE thread_id=?

-- name: COPY_DELTA_UNWRITTEN
-- params: ?1 target, ?2 source
INSERT OR REPLACE INTO delta_unwritten(thread_id,checkpoint_ns,checkpoint_id,channels)SELECT ?,checkpoint_ns,checkpoint_id,channels FROM delta_unwritten WHERE thread_id=?

-- name: COPY_DELTA_FROZEN
-- params: ?1 target, ?2 source
INSERT OR REPLACE INTO delta_frozen(thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent)SELECT ?,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent FROM delta_frozen WHERE thread_id=?

-- name: CLEAR_SCOPE
DELETE FROM d1saver_scope

-- name: SCOPE_TARGET
-- params: ?1 target
INSERT INTO d1saver_scope(thread_id)VALUES(?)

-- name: CLEAR_KEEP
DELETE FROM d1saver_keep

-- name: CLEAR_RELINK
DELETE FROM d1saver_relink

-- name: SCOPE_THREADS
-- params: ?1 thread_ids
INSERT OR IGNORE INTO d1saver_scope(thread_id)SELECT CAST(unhex(value)AS TEXT)FROM json_each(?)

-- name: SCOPE_RUNS
-- params: ?1 run_ids
INSERT OR IGNORE INTO d1saver_scope(thread_id)SELECT DISTINCT thread_id FROM checkpoints WHERE run_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))

-- name: PLAN_KEEP
-- params: ?1 keep
INSERT OR IGNORE INTO d1saver_keep(thread_id,checkpoint_ns,checkpoint_id)WITH RECURSIVE ranked AS(SELECT c.thread_id,c.checkpoint_ns,c.checkpoint_id,c.parent_checkpoint_id,ROW_NUMBER()OVER(PARTITION BY c.thread_id,c.checkpoint_ns ORDER BY c.checkpoint_id DESC)rn FROM checkpoints c WHERE c.thread_id IN(SELECT thread_id FROM d1saver_scope)),spaces AS(SELECT thread_id,checkpoint_ns,checkpoint_id newest FROM ranked WHERE rn=1),peel(thread_id,checkpoint_ns,s,head)AS(SELECT thread_id,checkpoint_ns,checkpoint_ns,rtrim(checkpoint_ns,replace(checkpoint_ns,'|',''))FROM spaces UNION ALL SELECT thread_id,checkpoint_ns,substr(head,1,length(head)- 1),rtrim(substr(head,1,length(head)- 1),replace(substr(head,1,length(head)- 1),'|',''))FROM peel WHERE head<>'' AND length(s)>length(head)AND rtrim(substr(s,length(head)+ 1),'0123456789')=''),owners AS(SELECT f.thread_id,f.checkpoint_ns,p.checkpoint_ns parent_ns,p.newest parent_newest,c.newest newest,substr(f.s,length(f.head)+ instr(substr(f.s,length(f.head)+ 1),':')+ 1)task_id FROM peel f JOIN spaces p ON p.thread_id=f.thread_id AND p.checkpoint_ns=substr(f.head,1,max(length(f.head)- 1,0))JOIN spaces c ON c.thread_id=f.thread_id AND c.checkpoint_ns=f.checkpoint_ns WHERE f.checkpoint_ns<>'' AND instr(substr(f.s,length(f.head)+ 1),':')>1),keep(thread_id,checkpoint_ns,checkpoint_id)AS(SELECT r.thread_id,r.checkpoint_ns,r.checkpoint_id FROM ranked r WHERE(r.rn<=? AND NOT EXISTS(SELECT 1 FROM owners o WHERE o.thread_id=r.thread_id AND o.checkpoint_ns=r.checkpoint_ns))OR EXISTS(SELECT 1 FROM tags g WHERE g.thread_id=r.thread_id AND g.checkpoint_ns=r.checkpoint_ns AND g.checkpoint_id=r.checkpoint_id)UNION SELECT r.thread_id,r.checkpoint_ns,r.checkpoint_id FROM keep k CROSS JOIN owners o ON o.thread_id=k.thread_id AND o.parent_ns=k.checkpoint_ns CROSS JOIN ranked r ON r.thread_id=o.thread_id AND r.checkpoint_ns=o.checkpoint_ns AND r.rn<=max(?1,1)WHERE EXISTS(SELECT 1 FROM writes w WHERE w.thread_id=k.thread_id AND w.checkpoint_ns=k.checkpoint_ns AND w.checkpoint_id=k.checkpoint_id AND w.task_id=o.task_id)OR(k.checkpoint_id=o.parent_newest AND o.newest>k.checkpoint_id))SELECT thread_id,checkpoint_ns,checkpoint_id FROM keep

-- name: PLAN_KEEP_OTHER_RUNS
-- params: ?1 run_ids
INSERT OR IGNORE INTO d1saver_keep(thread_id,checkpoint_ns,checkpoint_id)SELECT thread_id,checkpoint_ns,checkpoint_id FROM checkpoints WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)AND(run_id IS NULL OR run_id NOT IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?)))

-- name: FREEZE
INSERT OR IGNORE INTO delta_frozen(thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels)WITH RECURSIVE walk(thread_id,checkpoint_ns,origin,channel,depth,cur,steps,bound)AS(SELECT c.thread_id,c.checkpoint_ns,c.checkpoint_id,s.value,COALESCE((SELECT MAX(f.depth)FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id AND f.channel=s.value AND f.kind='c'),1),c.parent_checkpoint_id,1,(SELECT COUNT(*)FROM checkpoints n WHERE n.thread_id=c.thread_id AND n.checkpoint_ns=c.checkpoint_ns)FROM d1saver_keep k CROSS JOIN checkpoints c ON c.thread_id=k.thread_id AND c.checkpoint_ns=k.checkpoint_ns AND c.checkpoint_id=k.checkpoint_id CROSS JOIN json_each((SELECT json_group_array(d.key)FROM json_each(c.metadata,'$.counters_since_delta_snapshot')d WHERE d.key NOT IN(SELECT value FROM json_each(c.channels))AND d.key NOT IN(SELECT u.value FROM delta_unwritten x,json_each(x.channels)u WHERE x.thread_id=c.thread_id AND x.checkpoint_ns=c.checkpoint_ns AND x.checkpoint_id=c.checkpoint_id)))s WHERE c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=c.thread_id AND k.checkpoint_ns=c.checkpoint_ns AND k.checkpoint_id=c.parent_checkpoint_id)AND NOT(EXISTS(SELECT 1 FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id AND f.channel=s.value)AND(SELECT MAX(f.depth)FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id AND f.channel=s.value AND f.kind='c')IS NULL)UNION ALL SELECT w.thread_id,w.checkpoint_ns,w.origin,w.channel,w.depth + COALESCE((SELECT MAX(f.depth)FROM delta_frozen f WHERE f.thread_id=p.thread_id AND f.checkpoint_ns=p.checkpoint_ns AND f.checkpoint_id=p.checkpoint_id AND f.channel=w.channel AND f.kind='c'),1),p.parent_checkpoint_id,w.steps + 1,w.bound FROM walk w CROSS JOIN checkpoints p ON p.thread_id=w.thread_id AND p.checkpoint_ns=w.checkpoint_ns AND p.checkpoint_id=w.cur WHERE p.parent_checkpoint_id IS NOT NULL AND w.steps<w.bound AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=p.thread_id AND k.checkpoint_ns=p.checkpoint_ns AND k.checkpoint_id=p.checkpoint_id)AND w.channel NOT IN(SELECT value FROM json_each(p.channels))AND NOT(EXISTS(SELECT 1 FROM delta_frozen f WHERE f.thread_id=p.thread_id AND f.checkpoint_ns=p.checkpoint_ns AND f.checkpoint_id=p.checkpoint_id AND f.channel=w.channel)AND(SELECT MAX(f.depth)FROM delta_frozen f WHERE f.thread_id=p.thread_id AND f.checkpoint_ns=p.checkpoint_ns AND f.checkpoint_id=p.checkpoint_id AND f.channel=w.channel AND f.kind='c')IS NULL))SELECT w.thread_id,w.checkpoint_ns,w.origin,w.channel,'w',w.depth,x.task_id,e.value->>0,w.cur,x.task_path,COALESCE(e.value->>2,'msgpack'),e.value->>3,NULL,NULL FROM walk w CROSS JOIN writes x ON x.thread_id=w.thread_id AND x.checkpoint_ns=w.checkpoint_ns AND x.checkpoint_id=w.cur CROSS JOIN json_each(CASE WHEN substr(x.value,1,2)='p:' THEN substr(x.value,3)ELSE json_array(json_array(x.idx,x.channel,x.type,x.value))END)e WHERE e.value->>1=w.channel AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.cur)AND EXISTS(SELECT 1 FROM checkpoints n WHERE n.thread_id=w.thread_id AND n.checkpoint_ns=w.checkpoint_ns AND n.checkpoint_id=w.cur)UNION ALL SELECT w.thread_id,w.checkpoint_ns,w.origin,w.channel,'s',w.depth,'',0,w.cur,'',p.type,p.checkpoint,p.metadata,p.channels FROM walk w CROSS JOIN checkpoints p ON p.thread_id=w.thread_id AND p.checkpoint_ns=w.checkpoint_ns AND p.checkpoint_id=w.cur WHERE NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.cur)AND w.channel IN(SELECT value FROM json_each(p.channels))UNION ALL SELECT w.thread_id,w.checkpoint_ns,w.origin,w.channel,f.kind,w.depth + f.depth,f.task_id,f.idx,f.src_checkpoint_id,f.task_path,f.type,f.value,f.metadata,f.channels FROM walk w CROSS JOIN delta_frozen f ON f.thread_id=w.thread_id AND f.checkpoint_ns=w.checkpoint_ns AND f.checkpoint_id=w.cur AND f.channel=w.channel WHERE NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.cur)AND f.kind<>'c' UNION ALL SELECT w.thread_id,w.checkpoint_ns,w.origin,w.channel,'c',w.depth,'',0,w.cur,'',NULL,NULL,NULL,NULL FROM walk w WHERE EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.cur)

-- name: FREEZE_DONE
DELETE FROM delta_frozen AS c WHERE c.kind='c' AND c.thread_id IN(SELECT thread_id FROM d1saver_scope)AND EXISTS(SELECT 1 FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id AND f.channel=c.channel AND f.depth>=c.depth AND NOT(f.kind='c' AND f.depth=c.depth))

-- name: FREEZE_PIECES
INSERT OR IGNORE INTO chunks(thread_id,checkpoint_ns,checkpoint_id,owner,seq,data)SELECT f.thread_id,f.checkpoint_ns,f.checkpoint_id,'f/'||f.src_checkpoint_id||'/'||k.owner,k.seq,k.data FROM delta_frozen f CROSS JOIN chunks k ON k.thread_id=f.thread_id AND k.checkpoint_ns=f.checkpoint_ns AND k.checkpoint_id=f.src_checkpoint_id AND(k.owner=CASE f.kind WHEN 'w' THEN f.task_id||'/'||f.idx END OR(f.kind='s' AND k.owner IN('',':metadata')))WHERE f.thread_id IN(SELECT thread_id FROM d1saver_scope)UNION ALL SELECT f.thread_id,f.checkpoint_ns,f.checkpoint_id,k.owner,k.seq,k.data FROM delta_frozen f CROSS JOIN chunks k ON k.thread_id=f.thread_id AND k.checkpoint_ns=f.checkpoint_ns AND k.checkpoint_id<>f.checkpoint_id AND(k.owner='f/'||f.src_checkpoint_id||'/'||CASE f.kind WHEN 'w' THEN f.task_id||'/'||f.idx END OR(f.kind='s' AND k.owner IN('f/'||f.src_checkpoint_id||'/','f/'||f.src_checkpoint_id||'/:metadata')))WHERE f.thread_id IN(SELECT thread_id FROM d1saver_scope)

-- name: PLAN_RELINK
INSERT OR REPLACE INTO d1saver_relink(thread_id,checkpoint_ns,checkpoint_id,new_parent)WITH RECURSIVE walk(thread_id,checkpoint_ns,origin,cur,kept)AS(SELECT c.thread_id,c.checkpoint_ns,c.checkpoint_id,c.parent_checkpoint_id,0 FROM d1saver_keep k CROSS JOIN checkpoints c ON c.thread_id=k.thread_id AND c.checkpoint_ns=k.checkpoint_ns AND c.checkpoint_id=k.checkpoint_id WHERE c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS(SELECT 1 FROM d1saver_keep k2 WHERE k2.thread_id=c.thread_id AND k2.checkpoint_ns=c.checkpoint_ns AND k2.checkpoint_id=c.parent_checkpoint_id)UNION SELECT w.thread_id,w.checkpoint_ns,w.origin,p.parent_checkpoint_id,EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=p.parent_checkpoint_id)FROM walk w JOIN checkpoints p ON p.thread_id=w.thread_id AND p.checkpoint_ns=w.checkpoint_ns AND p.checkpoint_id=w.cur WHERE w.kept=0)SELECT thread_id,checkpoint_ns,origin checkpoint_id,MAX(CASE WHEN kept THEN cur END)new_parent FROM walk GROUP BY thread_id,checkpoint_ns,origin

-- name: APPLY_RELINK
UPDATE checkpoints SET parent_checkpoint_id=r.new_parent FROM d1saver_relink r WHERE checkpoints.thread_id=r.thread_id AND checkpoints.checkpoint_ns=r.checkpoint_ns AND checkpoints.checkpoint_id=r.checkpoint_id

-- name: REBIND_FROZEN
UPDATE delta_frozen SET parent=r.new_parent FROM d1saver_relink r WHERE delta_frozen.thread_id=r.thread_id AND delta_frozen.checkpoint_ns=r.checkpoint_ns AND delta_frozen.checkpoint_id=r.checkpoint_id

-- name: DELETE_UNKEPT_WRITES
DELETE FROM writes WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=writes.thread_id AND k.checkpoint_ns=writes.checkpoint_ns AND k.checkpoint_id=writes.checkpoint_id)AND writes.checkpoint_id<=(SELECT MAX(n.checkpoint_id)FROM checkpoints n WHERE n.thread_id=writes.thread_id AND n.checkpoint_ns=writes.checkpoint_ns)

-- name: DELETE_UNKEPT_CHUNKS
DELETE FROM chunks WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=chunks.thread_id AND k.checkpoint_ns=chunks.checkpoint_ns AND k.checkpoint_id=chunks.checkpoint_id)AND chunks.checkpoint_id<=(SELECT MAX(n.checkpoint_id)FROM checkpoints n WHERE n.thread_id=chunks.thread_id AND n.checkpoint_ns=chunks.checkpoint_ns)

-- name: DELETE_UNKEPT_TAGS
DELETE FROM tags WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=tags.thread_id AND k.checkpoint_ns=tags.checkpoint_ns AND k.checkpoint_id=tags.checkpoint_id)

-- name: DELETE_UNKEPT_CHECKPOINTS
DELETE FROM checkpoints WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=checkpoints.thread_id AND k.checkpoint_ns=checkpoints.checkpoint_ns AND k.checkpoint_id=checkpoints.checkpoint_id)

-- name: SUMMARIZE_PLAN
SELECT s.thread_id,(SELECT COUNT(*)FROM checkpoints c WHERE c.thread_id=s.thread_id)checkpoints_total,(SELECT COUNT(*)FROM checkpoints c WHERE c.thread_id=s.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=c.thread_id AND k.checkpoint_ns=c.checkpoint_ns AND k.checkpoint_id=c.checkpoint_id))checkpoints,(SELECT COALESCE(SUM(CASE WHEN substr(w.value,1,2)='p:' THEN json_array_length(substr(w.value,3))ELSE 1 END),0)FROM writes w WHERE w.thread_id=s.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.checkpoint_id)AND w.checkpoint_id<=(SELECT MAX(n.checkpoint_id)FROM checkpoints n WHERE n.thread_id=w.thread_id AND n.checkpoint_ns=w.checkpoint_ns))writes,(SELECT COALESCE(SUM(LENGTH(c.checkpoint)+ LENGTH(c.metadata)),0)FROM checkpoints c WHERE c.thread_id=s.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=c.thread_id AND k.checkpoint_ns=c.checkpoint_ns AND k.checkpoint_id=c.checkpoint_id))+(SELECT COALESCE(SUM(LENGTH(w.value)),0)FROM writes w WHERE w.thread_id=s.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.checkpoint_id)AND w.checkpoint_id<=(SELECT MAX(n.checkpoint_id)FROM checkpoints n WHERE n.thread_id=w.thread_id AND n.checkpoint_ns=w.checkpoint_ns))+(SELECT COALESCE(SUM(LENGTH(pt.data)),0)FROM chunks pt WHERE pt.thread_id=s.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=pt.thread_id AND k.checkpoint_ns=pt.checkpoint_ns AND k.checkpoint_id=pt.checkpoint_id)AND pt.checkpoint_id<=(SELECT MAX(n.checkpoint_id)FROM checkpoints n WHERE n.thread_id=pt.thread_id AND n.checkpoint_ns=pt.checkpoint_ns))bytes FROM d1saver_scope s ORDER BY s.thread_id

-- name: RECORD_PLAN
-- params: ?1 op_id
INSERT OR IGNORE INTO d1saver_ops(op_id,result,created_at)SELECT ?,json_group_array(json_array(hex(p.thread_id),p.checkpoints_total,p.checkpoints,p.writes,p.bytes)),CAST(strftime('%s','now')AS INTEGER)FROM(SELECT s.thread_id,(SELECT COUNT(*)FROM checkpoints c WHERE c.thread_id=s.thread_id)checkpoints_total,(SELECT COUNT(*)FROM checkpoints c WHERE c.thread_id=s.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=c.thread_id AND k.checkpoint_ns=c.checkpoint_ns AND k.checkpoint_id=c.checkpoint_id))checkpoints,(SELECT COALESCE(SUM(CASE WHEN substr(w.value,1,2)='p:' THEN json_array_length(substr(w.value,3))ELSE 1 END),0)FROM writes w WHERE w.thread_id=s.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.checkpoint_id)AND w.checkpoint_id<=(SELECT MAX(n.checkpoint_id)FROM checkpoints n WHERE n.thread_id=w.thread_id AND n.checkpoint_ns=w.checkpoint_ns))writes,(SELECT COALESCE(SUM(LENGTH(c.checkpoint)+ LENGTH(c.metadata)),0)FROM checkpoints c WHERE c.thread_id=s.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=c.thread_id AND k.checkpoint_ns=c.checkpoint_ns AND k.checkpoint_id=c.checkpoint_id))+(SELECT COALESCE(SUM(LENGTH(w.value)),0)FROM writes w WHERE w.thread_id=s.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.checkpoint_id)AND w.checkpoint_id<=(SELECT MAX(n.checkpoint_id)FROM checkpoints n WHERE n.thread_id=w.thread_id AND n.checkpoint_ns=w.checkpoint_ns))+(SELECT COALESCE(SUM(LENGTH(pt.data)),0)FROM chunks pt WHERE pt.thread_id=s.thread_id AND NOT EXISTS(SELECT 1 FROM d1saver_keep k WHERE k.thread_id=pt.thread_id AND k.checkpoint_ns=pt.checkpoint_ns AND k.checkpoint_id=pt.checkpoint_id)AND pt.checkpoint_id<=(SELECT MAX(n.checkpoint_id)FROM checkpoints n WHERE n.thread_id=pt.thread_id AND n.checkpoint_ns=pt.checkpoint_ns))bytes FROM d1saver_scope s ORDER BY s.thread_id)p

-- name: RECORDED_PLAN
-- params: ?1 op_id
SELECT CAST(unhex(r.value->>0)AS TEXT)thread_id,r.value->>1 checkpoints_total,r.value->>2 checkpoints,r.value->>3 writes,r.value->>4 bytes FROM d1saver_ops o,json_each(o.result)r WHERE o.op_id=? ORDER BY thread_id

-- name: THREADS_PAGE
-- params: ?1 after, ?2 limit
SELECT c.thread_id,COUNT(*)checkpoints,COUNT(DISTINCT c.checkpoint_ns)namespaces,MAX(c.ts)updated,SUM(LENGTH(c.checkpoint)+ LENGTH(c.metadata))+(SELECT COALESCE(SUM(LENGTH(w.value)),0)FROM writes w WHERE w.thread_id=c.thread_id)+(SELECT COALESCE(SUM(LENGTH(p.data)),0)FROM chunks p WHERE p.thread_id=c.thread_id)+(SELECT COALESCE(SUM(LENGTH(k.data)),0)FROM d1saver_chunks k WHERE k.thread_id=c.thread_id)+(SELECT COALESCE(SUM(LENGTH(f.value)+ COALESCE(LENGTH(f.metadata),0)),0)FROM delta_frozen f WHERE f.thread_id=c.thread_id)bytes FROM checkpoints c WHERE c.thread_id>? GROUP BY c.thread_id ORDER BY c.thread_id LIMIT ?

-- name: THREADS_INFO
-- params: ?1 thread_ids
SELECT c.thread_id,COUNT(*)checkpoints,COUNT(DISTINCT c.checkpoint_ns)namespaces,MAX(c.ts)updated,SUM(LENGTH(c.checkpoint)+ LENGTH(c.metadata))+(SELECT COALESCE(SUM(LENGTH(w.value)),0)FROM writes w WHERE w.thread_id=c.thread_id)+(SELECT COALESCE(SUM(LENGTH(p.data)),0)FROM chunks p WHERE p.thread_id=c.thread_id)+(SELECT COALESCE(SUM(LENGTH(k.data)),0)FROM d1saver_chunks k WHERE k.thread_id=c.thread_id)+(SELECT COALESCE(SUM(LENGTH(f.value)+ COALESCE(LENGTH(f.metadata),0)),0)FROM delta_frozen f WHERE f.thread_id=c.thread_id)bytes FROM checkpoints c WHERE c.thread_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))GROUP BY c.thread_id ORDER BY c.thread_id

-- name: PLAN_PAGE
-- params: ?1 after, ?2 limit, ?3 keep, ?4 cutoff, ?5 batch_checkpoints, ?6 batch_threads
WITH RECURSIVE listed AS(SELECT c.thread_id,COUNT(*)checkpoints,MAX(c.ts)updated,ROW_NUMBER()OVER(ORDER BY c.thread_id)n FROM checkpoints c WHERE c.thread_id>? GROUP BY c.thread_id ORDER BY c.thread_id LIMIT CAST(? AS INTEGER)),judged AS(SELECT n,thread_id,checkpoints,updated,staged,expired,NOT staged AND(expired OR checkpoints>CAST(? AS INTEGER)OR EXISTS(SELECT 1 FROM d1saver_gc_pending g WHERE g.thread_id=s.thread_id))work,MAX(checkpoints - CASE WHEN expired THEN 0 ELSE CAST(?3 AS INTEGER)END,1)weight FROM(SELECT l.*,substr(l.thread_id,1,9)=char(31)||'d1saver-' staged,? IS NOT NULL AND COALESCE(l.updated,'')<?4 expired FROM listed l)s),packed(n,thread_id,checkpoints,updated,staged,expired,batch,cur,kind,load,size)AS(SELECT 0,NULL,NULL,NULL,NULL,NULL,NULL,-1,NULL,0,0 UNION ALL SELECT w.n,w.thread_id,w.checkpoints,w.updated,w.staged,w.expired,CASE WHEN w.work THEN p.cur + CASE WHEN(p.cur<0 OR w.expired<>p.kind OR p.load + w.weight>? OR p.size>=?)THEN 1 ELSE 0 END END,CASE WHEN w.work AND(p.cur<0 OR w.expired<>p.kind OR p.load + w.weight>?5 OR p.size>=?6)THEN p.cur + 1 ELSE p.cur END,CASE WHEN w.work AND(p.cur<0 OR w.expired<>p.kind OR p.load + w.weight>?5 OR p.size>=?6)THEN w.expired ELSE p.kind END,CASE WHEN NOT w.work THEN p.load WHEN(p.cur<0 OR w.expired<>p.kind OR p.load + w.weight>?5 OR p.size>=?6)THEN w.weight ELSE p.load + w.weight END,CASE WHEN NOT w.work THEN p.size WHEN(p.cur<0 OR w.expired<>p.kind OR p.load + w.weight>?5 OR p.size>=?6)THEN 1 ELSE p.size + 1 END FROM packed p CROSS JOIN judged w ON w.n=p.n + 1)SELECT thread_id,checkpoints,updated,staged,expired,batch FROM packed WHERE n>0 ORDER BY n

-- name: PLAN_THREADS
-- params: ?1 thread_ids, ?2 keep, ?3 cutoff, ?4 batch_checkpoints, ?5 batch_threads
WITH RECURSIVE listed AS(SELECT c.thread_id,COUNT(*)checkpoints,MAX(c.ts)updated,ROW_NUMBER()OVER(ORDER BY c.thread_id)n FROM checkpoints c WHERE c.thread_id IN(SELECT CAST(unhex(value)AS TEXT)FROM json_each(?))GROUP BY c.thread_id ORDER BY c.thread_id),judged AS(SELECT n,thread_id,checkpoints,updated,staged,expired,NOT staged AND(expired OR checkpoints>CAST(? AS INTEGER)OR EXISTS(SELECT 1 FROM d1saver_gc_pending g WHERE g.thread_id=s.thread_id))work,MAX(checkpoints - CASE WHEN expired THEN 0 ELSE CAST(?2 AS INTEGER)END,1)weight FROM(SELECT l.*,substr(l.thread_id,1,9)=char(31)||'d1saver-' staged,? IS NOT NULL AND COALESCE(l.updated,'')<?3 expired FROM listed l)s),packed(n,thread_id,checkpoints,updated,staged,expired,batch,cur,kind,load,size)AS(SELECT 0,NULL,NULL,NULL,NULL,NULL,NULL,-1,NULL,0,0 UNION ALL SELECT w.n,w.thread_id,w.checkpoints,w.updated,w.staged,w.expired,CASE WHEN w.work THEN p.cur + CASE WHEN(p.cur<0 OR w.expired<>p.kind OR p.load + w.weight>? OR p.size>=?)THEN 1 ELSE 0 END END,CASE WHEN w.work AND(p.cur<0 OR w.expired<>p.kind OR p.load + w.weight>?4 OR p.size>=?5)THEN p.cur + 1 ELSE p.cur END,CASE WHEN w.work AND(p.cur<0 OR w.expired<>p.kind OR p.load + w.weight>?4 OR p.size>=?5)THEN w.expired ELSE p.kind END,CASE WHEN NOT w.work THEN p.load WHEN(p.cur<0 OR w.expired<>p.kind OR p.load + w.weight>?4 OR p.size>=?5)THEN w.weight ELSE p.load + w.weight END,CASE WHEN NOT w.work THEN p.size WHEN(p.cur<0 OR w.expired<>p.kind OR p.load + w.weight>?4 OR p.size>=?5)THEN 1 ELSE p.size + 1 END FROM packed p CROSS JOIN judged w ON w.n=p.n + 1)SELECT thread_id,checkpoints,updated,staged,expired,batch FROM packed WHERE n>0 ORDER BY n

-- name: COUNT_LEFTOVERS_REMOVABLE
-- params: ?1 low, ?2 high
SELECT COUNT(*)staged FROM(SELECT t.thread_id FROM(SELECT thread_id FROM(SELECT thread_id FROM checkpoints WHERE thread_id>=? AND thread_id<? UNION SELECT thread_id FROM writes WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM chunks WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM tags WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM(SELECT thread_id FROM d1saver_chunks WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM delta_unwritten WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM delta_frozen WHERE thread_id>=?1 AND thread_id<?2)))t LEFT JOIN d1saver_staged s ON s.staging_id=t.thread_id WHERE(s.staging_id IS NULL OR s.expires_at<CAST(strftime('%s','now')AS INTEGER)OR substr(t.thread_id,1,16)=char(31)||'d1saver-moving'||char(31)OR substr(t.thread_id,1,17)=char(31)||'d1saver-leaving'||char(31)))

-- name: SCOPE_LEFTOVERS_REMOVABLE
-- params: ?1 low, ?2 high, ?3 name, ?4 holder
INSERT INTO d1saver_scope(thread_id)SELECT t.thread_id FROM(SELECT thread_id FROM(SELECT thread_id FROM checkpoints WHERE thread_id>=? AND thread_id<? UNION SELECT thread_id FROM writes WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM chunks WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM tags WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM(SELECT thread_id FROM d1saver_chunks WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM delta_unwritten WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM delta_frozen WHERE thread_id>=?1 AND thread_id<?2)))t LEFT JOIN d1saver_staged s ON s.staging_id=t.thread_id WHERE(s.staging_id IS NULL OR s.expires_at<CAST(strftime('%s','now')AS INTEGER)OR substr(t.thread_id,1,16)=char(31)||'d1saver-moving'||char(31)OR substr(t.thread_id,1,17)=char(31)||'d1saver-leaving'||char(31))AND EXISTS(SELECT 1 FROM leases WHERE name=? AND holder=?)

-- name: UNSTAGE_SCOPE
DELETE FROM d1saver_staged WHERE staging_id IN(SELECT thread_id FROM d1saver_scope)

-- name: SCOPED
SELECT COUNT(*)staged FROM d1saver_scope

-- name: FORGET_GC_GONE
DELETE FROM d1saver_gc_pending WHERE thread_id NOT IN(SELECT DISTINCT thread_id FROM checkpoints)

-- name: HISTORY
-- params: ?1 thread_id, ?2 limit
SELECT c.checkpoint_ns,c.checkpoint_id,c.parent_checkpoint_id,json_extract(c.metadata,'$.step')step,json_extract(c.metadata,'$.source')source,c.ts,LENGTH(c.checkpoint)+ LENGTH(c.metadata)bytes,(SELECT COALESCE(SUM(CASE WHEN substr(w.value,1,2)='p:' THEN json_array_length(substr(w.value,3))ELSE 1 END),0)FROM writes w WHERE w.thread_id=c.thread_id AND w.checkpoint_ns=c.checkpoint_ns AND w.checkpoint_id=c.checkpoint_id)writes,(SELECT group_concat(g.name,',')FROM tags g WHERE g.thread_id=c.thread_id AND g.checkpoint_ns=c.checkpoint_ns AND g.checkpoint_id=c.checkpoint_id)tags FROM checkpoints c WHERE c.thread_id=? ORDER BY c.checkpoint_id DESC,c.checkpoint_ns LIMIT ?

-- name: ACQUIRE_LEASE
-- params: ?1 name, ?2 holder, ?3 seconds
INSERT INTO leases(name,holder,expires_at)VALUES(?,?,CAST(strftime('%s','now')AS INTEGER)+ ?)ON CONFLICT(name)DO UPDATE SET holder=excluded.holder,expires_at=excluded.expires_at WHERE leases.expires_at<CAST(strftime('%s','now')AS INTEGER)OR leases.holder=excluded.holder RETURNING holder

-- name: CHECK_LEASE
-- params: ?1 name, ?2 holder
INSERT INTO d1saver_guards(lease_lost)SELECT 1 WHERE NOT EXISTS(SELECT 1 FROM leases WHERE name=? AND holder=?)

-- name: RENEW_LEASE
-- params: ?1 seconds, ?2 name, ?3 holder
UPDATE leases SET expires_at=CAST(strftime('%s','now')AS INTEGER)+ ? WHERE name=? AND holder=?

-- name: RELEASE_LEASE
-- params: ?1 name, ?2 holder
DELETE FROM leases WHERE name=? AND holder=?

-- name: BREAK_LEASE
-- params: ?1 name
DELETE FROM leases WHERE name=?

-- name: LEASE_HOLDER
-- params: ?1 name
SELECT holder,expires_at - CAST(strftime('%s','now')AS INTEGER)seconds_left FROM leases WHERE name=?

-- name: RUN_BEGIN
-- params: ?1 run_id, ?2 database_id, ?3 trigger, ?4 status, ?5 reason, ?6 keep, ?7 max_age_days
INSERT OR REPLACE INTO d1saver_compaction_runs(run_id,database_id,trigger,started_at,status,reason,keep,max_age_days)VALUES(?,?,?,strftime('%Y-%m-%dT%H:%M:%fZ','now'),?,?,CAST(? AS INTEGER),CAST(? AS INTEGER))

-- name: RUNS_INTERRUPTED
-- params: ?1 run_id, ?2 database_id
UPDATE d1saver_compaction_runs SET status='interrupted',ended_at=strftime('%Y-%m-%dT%H:%M:%fZ','now'),reason='stopped midway (the Worker was killed or ran out of time); '||?||' went on' WHERE database_id=? AND status='running' AND run_id<>?1

-- name: RUN_ADD_BATCH
-- params: ?1 op_id, ?2 expired, ?3 run_id, ?4 database_id
UPDATE d1saver_compaction_runs SET batches=batches + 1,threads_compacted=threads_compacted +(SELECT COUNT(*)FROM d1saver_ops o,json_each(o.result)r WHERE o.op_id=? AND CAST(? AS INTEGER)=0 AND r.value->>2>0),threads_expired=threads_expired +(SELECT COUNT(*)FROM d1saver_ops o,json_each(o.result)r WHERE o.op_id=?1 AND CAST(?2 AS INTEGER)=1),checkpoints_deleted=checkpoints_deleted +(SELECT COALESCE(SUM(r.value->>2),0)FROM d1saver_ops o,json_each(o.result)r WHERE o.op_id=?1),writes_deleted=writes_deleted +(SELECT COALESCE(SUM(r.value->>3),0)FROM d1saver_ops o,json_each(o.result)r WHERE o.op_id=?1),bytes_freed=bytes_freed +(SELECT COALESCE(SUM(r.value->>4),0)FROM d1saver_ops o,json_each(o.result)r WHERE o.op_id=?1)WHERE run_id=? AND database_id=?

-- name: RUN_END
-- params: ?1 status, ?2 reason, ?3 threads_scanned, ?4 run_id, ?5 database_id
UPDATE d1saver_compaction_runs SET ended_at=strftime('%Y-%m-%dT%H:%M:%fZ','now'),status=?,reason=?,threads_scanned=threads_scanned + CAST(? AS INTEGER)WHERE run_id=? AND database_id=?

-- name: CURSOR_GET
-- params: ?1 name
SELECT after,run_id FROM d1saver_compaction_cursor WHERE name=?

-- name: CURSOR_SET
-- params: ?1 name, ?2 after, ?3 run_id
INSERT OR REPLACE INTO d1saver_compaction_cursor(name,after,run_id,updated_at)VALUES(?,?,?,strftime('%Y-%m-%dT%H:%M:%fZ','now'))

-- name: CURSOR_CLEAR
-- params: ?1 name
DELETE FROM d1saver_compaction_cursor WHERE name=?

-- name: COMPACTION_RUNS
-- params: ?1 limit
SELECT run_id,database_id,trigger,started_at,ended_at,status,reason,keep,max_age_days,threads_scanned,threads_compacted,threads_expired,checkpoints_deleted,writes_deleted,bytes_freed,batches FROM d1saver_compaction_runs ORDER BY started_at DESC,run_id,database_id LIMIT ?

-- name: GC_DONE
DELETE FROM d1saver_gc_pending WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)

-- name: VOID_MOVES_IN_SCOPE
DELETE FROM d1saver_moves WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)

-- name: STORED_SAMPLE
-- params: ?1 chars, ?2 thread_id
SELECT checkpoint_id,substr(checkpoint,1,?)head,LENGTH(checkpoint)bytes,metadata FROM checkpoints WHERE thread_id=? ORDER BY checkpoint_id DESC LIMIT 1

-- name: STORAGE_SUMMARY
SELECT 'checkpoints' tbl,COUNT(*)row_count,COALESCE(SUM(LENGTH(checkpoint)+ LENGTH(metadata)),0)bytes FROM checkpoints UNION ALL SELECT 'writes',COUNT(*),COALESCE(SUM(LENGTH(value)),0)FROM writes UNION ALL SELECT 'chunks',COUNT(*),COALESCE(SUM(LENGTH(data)),0)FROM chunks UNION ALL SELECT 'tags',COUNT(*),0 FROM tags UNION ALL SELECT * FROM(SELECT 'delta_frozen',COUNT(*),COALESCE(SUM(LENGTH(value)+ COALESCE(LENGTH(metadata),0)),0)FROM delta_frozen UNION ALL SELECT 'd1saver_chunks',COUNT(*),COALESCE(SUM(LENGTH(data)),0)FROM d1saver_chunks)

-- name: TRANSFER_PAGE_D1SAVER_CHUNKS
-- params: ?1 thread_id, ?2 after_level, ?3 after_id, ?4 limit, ?5 budget
SELECT level,id,data,available FROM(SELECT level,id,data,SUM(COALESCE(LENGTH(data),0))OVER(ORDER BY level,id ROWS UNBOUNDED PRECEDING)-(COALESCE(LENGTH(data),0))bytes_before,COUNT(*)OVER()available FROM(SELECT level,id,data FROM d1saver_chunks WHERE thread_id=? AND(? IS NULL OR(level,id)>(?2,?))ORDER BY level,id LIMIT ?))WHERE bytes_before<? ORDER BY level,id

-- name: TRANSFER_PAGE_CHECKPOINTS
-- params: ?1 thread_id, ?2 after_checkpoint_ns, ?3 after_checkpoint_id, ?4 limit, ?5 budget
SELECT checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts,available FROM(SELECT checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts,SUM(COALESCE(LENGTH(parent_checkpoint_id),0)+ COALESCE(LENGTH(type),0)+ COALESCE(LENGTH(checkpoint),0)+ COALESCE(LENGTH(metadata),0)+ COALESCE(LENGTH(channels),0)+ COALESCE(LENGTH(run_id),0)+ COALESCE(LENGTH(ts),0))OVER(ORDER BY checkpoint_ns,checkpoint_id ROWS UNBOUNDED PRECEDING)-(COALESCE(LENGTH(parent_checkpoint_id),0)+ COALESCE(LENGTH(type),0)+ COALESCE(LENGTH(checkpoint),0)+ COALESCE(LENGTH(metadata),0)+ COALESCE(LENGTH(channels),0)+ COALESCE(LENGTH(run_id),0)+ COALESCE(LENGTH(ts),0))bytes_before,COUNT(*)OVER()available FROM(SELECT checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts FROM checkpoints WHERE thread_id=? AND(? IS NULL OR(checkpoint_ns,checkpoint_id)>(?2,?))ORDER BY checkpoint_ns,checkpoint_id LIMIT ?))WHERE bytes_before<? ORDER BY checkpoint_ns,checkpoint_id

-- name: TRANSFER_PAGE_WRITES
-- params: ?1 thread_id, ?2 after_checkpoint_ns, ?3 after_checkpoint_id, ?4 after_task_id, ?5 after_idx, ?6 limit, ?7 budget
SELECT checkpoint_ns,checkpoint_id,task_id,idx,task_path,channel,type,value,available FROM(SELECT checkpoint_ns,checkpoint_id,task_id,idx,task_path,channel,type,value,SUM(COALESCE(LENGTH(task_path),0)+ COALESCE(LENGTH(channel),0)+ COALESCE(LENGTH(type),0)+ COALESCE(LENGTH(value),0))OVER(ORDER BY checkpoint_ns,checkpoint_id,task_id,idx ROWS UNBOUNDED PRECEDING)-(COALESCE(LENGTH(task_path),0)+ COALESCE(LENGTH(channel),0)+ COALESCE(LENGTH(type),0)+ COALESCE(LENGTH(value),0))bytes_before,COUNT(*)OVER()available FROM(SELECT checkpoint_ns,checkpoint_id,task_id,idx,task_path,channel,type,value FROM writes WHERE thread_id=? AND(? IS NULL OR(checkpoint_ns,checkpoint_id,task_id,idx)>(?2,?,?,?))ORDER BY checkpoint_ns,checkpoint_id,task_id,idx LIMIT ?))WHERE bytes_before<? ORDER BY checkpoint_ns,checkpoint_id,task_id,idx

-- name: TRANSFER_PAGE_CHUNKS
-- params: ?1 thread_id, ?2 after_checkpoint_ns, ?3 after_checkpoint_id, ?4 after_owner, ?5 after_seq, ?6 limit, ?7 budget
SELECT checkpoint_ns,checkpoint_id,owner,seq,data,available FROM(SELECT checkpoint_ns,checkpoint_id,owner,seq,data,SUM(COALESCE(LENGTH(data),0))OVER(ORDER BY checkpoint_ns,checkpoint_id,owner,seq ROWS UNBOUNDED PRECEDING)-(COALESCE(LENGTH(data),0))bytes_before,COUNT(*)OVER()available FROM(SELECT checkpoint_ns,checkpoint_id,owner,seq,data FROM chunks WHERE thread_id=? AND(? IS NULL OR(checkpoint_ns,checkpoint_id,owner,seq)>(?2,?,?,?))ORDER BY checkpoint_ns,checkpoint_id,owner,seq LIMIT ?))WHERE bytes_before<? ORDER BY checkpoint_ns,checkpoint_id,owner,seq

-- name: TRANSFER_PAGE_TAGS
-- params: ?1 thread_id, ?2 after_checkpoint_ns, ?3 after_name, ?4 limit, ?5 budget
SELECT checkpoint_ns,name,checkpoint_id,created_at,available FROM(SELECT checkpoint_ns,name,checkpoint_id,created_at,SUM(COALESCE(LENGTH(checkpoint_id),0)+ COALESCE(LENGTH(created_at),0))OVER(ORDER BY checkpoint_ns,name ROWS UNBOUNDED PRECEDING)-(COALESCE(LENGTH(checkpoint_id),0)+ COALESCE(LENGTH(created_at),0))bytes_before,COUNT(*)OVER()available FROM(SELECT checkpoint_ns,name,checkpoint_id,created_at FROM tags WHERE thread_id=? AND(? IS NULL OR(checkpoint_ns,name)>(?2,?))ORDER BY checkpoint_ns,name LIMIT ?))WHERE bytes_before<? ORDER BY checkpoint_ns,name

-- name: TRANSFER_PAGE_DELTA_UNWRITTEN
-- params: ?1 thread_id, ?2 after_checkpoint_ns, ?3 after_checkpoint_id, ?4 limit, ?5 budget
SELECT checkpoint_ns,checkpoint_id,channels,available FROM(SELECT checkpoint_ns,checkpoint_id,channels,SUM(COALESCE(LENGTH(channels),0))OVER(ORDER BY checkpoint_ns,checkpoint_id ROWS UNBOUNDED PRECEDING)-(COALESCE(LENGTH(channels),0))bytes_before,COUNT(*)OVER()available FROM(SELECT checkpoint_ns,checkpoint_id,channels FROM delta_unwritten WHERE thread_id=? AND(? IS NULL OR(checkpoint_ns,checkpoint_id)>(?2,?))ORDER BY checkpoint_ns,checkpoint_id LIMIT ?))WHERE bytes_before<? ORDER BY checkpoint_ns,checkpoint_id

-- name: TRANSFER_PAGE_DELTA_FROZEN
-- params: ?1 thread_id, ?2 after_checkpoint_ns, ?3 after_checkpoint_id, ?4 after_channel, ?5 after_kind, ?6 after_depth, ?7 after_task_id, ?8 after_idx, ?9 limit, ?10 budget
SELECT checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent,available FROM(SELECT checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent,SUM(COALESCE(LENGTH(src_checkpoint_id),0)+ COALESCE(LENGTH(task_path),0)+ COALESCE(LENGTH(type),0)+ COALESCE(LENGTH(value),0)+ COALESCE(LENGTH(metadata),0)+ COALESCE(LENGTH(channels),0)+ COALESCE(LENGTH(parent),0))OVER(ORDER BY checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx ROWS UNBOUNDED PRECEDING)-(COALESCE(LENGTH(src_checkpoint_id),0)+ COALESCE(LENGTH(task_path),0)+ COALESCE(LENGTH(type),0)+ COALESCE(LENGTH(value),0)+ COALESCE(LENGTH(metadata),0)+ COALESCE(LENGTH(channels),0)+ COALESCE(LENGTH(parent),0))bytes_before,COUNT(*)OVER()available FROM(SELECT checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent FROM delta_frozen WHERE thread_id=? AND(? IS NULL OR(checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx)>(?2,?,?,?,?,?,?))ORDER BY checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx LIMIT ?))WHERE bytes_before<? ORDER BY checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx

-- name: TRANSFER_INSERT_D1SAVER_CHUNKS
-- params: ?1 thread_id, ?2 level, ?3 id, ?4 data
INSERT OR REPLACE INTO d1saver_chunks(thread_id,level,id,data)VALUES(?,?,?,?)

-- name: TRANSFER_INSERT_CHECKPOINTS
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 parent_checkpoint_id, ?5 type, ?6 checkpoint, ?7 metadata, ?8 channels, ?9 run_id, ?10 ts
INSERT OR REPLACE INTO checkpoints(thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts)VALUES(?,?,?,?,?,?,?,?,?,?)

-- name: TRANSFER_INSERT_WRITES
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 task_id, ?5 idx, ?6 task_path, ?7 channel, ?8 type, ?9 value
INSERT OR REPLACE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,idx,task_path,channel,type,value)VALUES(?,?,?,?,?,?,?,?,?)

-- name: TRANSFER_INSERT_CHUNKS
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 owner, ?5 seq, ?6 data
INSERT OR REPLACE INTO chunks(thread_id,checkpoint_ns,checkpoint_id,owner,seq,data)VALUES(?,?,?,?,?,?)

-- name: TRANSFER_INSERT_TAGS
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 name, ?4 checkpoint_id, ?5 created_at
INSERT OR REPLACE INTO tags(thread_id,checkpoint_ns,name,checkpoint_id,created_at)VALUES(?,?,?,?,?)

-- name: TRANSFER_INSERT_DELTA_UNWRITTEN
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 channels
INSERT OR REPLACE INTO delta_unwritten(thread_id,checkpoint_ns,checkpoint_id,channels)VALUES(?,?,?,?)

-- name: TRANSFER_INSERT_DELTA_FROZEN
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 channel, ?5 kind, ?6 depth, ?7 task_id, ?8 idx, ?9 src_checkpoint_id, ?10 task_path, ?11 type, ?12 value, ?13 metadata, ?14 channels, ?15 parent
INSERT OR REPLACE INTO delta_frozen(thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent)VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)

-- name: RENAME_DROP_CHECKPOINT_PIECES
-- params: ?1 thread_id, ?2 staged
DELETE FROM chunks WHERE thread_id=? AND owner IN('',':metadata')AND EXISTS(SELECT 1 FROM checkpoints s WHERE s.thread_id=? AND s.checkpoint_ns=chunks.checkpoint_ns AND s.checkpoint_id=chunks.checkpoint_id)

-- name: RENAME_DROP_WRITE_PIECES
-- params: ?1 thread_id, ?2 staged
DELETE FROM chunks WHERE thread_id=? AND EXISTS(SELECT 1 FROM writes s WHERE s.thread_id=? AND s.checkpoint_ns=chunks.checkpoint_ns AND s.checkpoint_id=chunks.checkpoint_id AND chunks.owner=s.task_id||'/'||s.idx)

-- name: RENAME_DROP_UNWRITTEN
-- params: ?1 thread_id, ?2 staged
DELETE FROM delta_unwritten WHERE thread_id=? AND EXISTS(SELECT 1 FROM checkpoints s WHERE s.thread_id=? AND s.checkpoint_ns=delta_unwritten.checkpoint_ns AND s.checkpoint_id=delta_unwritten.checkpoint_id)

-- name: RENAME_DROP_FROZEN
-- params: ?1 thread_id, ?2 staged
DELETE FROM delta_frozen WHERE thread_id=? AND EXISTS(SELECT 1 FROM checkpoints s WHERE s.thread_id=? AND s.checkpoint_ns=delta_frozen.checkpoint_ns AND s.checkpoint_id=delta_frozen.checkpoint_id AND s.parent_checkpoint_id IS NOT delta_frozen.parent)

-- name: RENAME_UNPACK_PIECES
-- params: ?1 thread_id, ?2 staged
DELETE FROM chunks WHERE thread_id=? AND EXISTS(SELECT 1 FROM writes t WHERE t.thread_id=?1 AND t.checkpoint_ns=chunks.checkpoint_ns AND t.checkpoint_id=chunks.checkpoint_id AND chunks.owner=t.task_id||'/'||t.idx AND EXISTS(SELECT 1 FROM writes s CROSS JOIN json_each(CASE WHEN substr(s.value,1,2)='p:' THEN substr(s.value,3)ELSE json_array(json_array(s.idx))END)q WHERE s.thread_id=? AND s.checkpoint_ns=t.checkpoint_ns AND s.checkpoint_id=t.checkpoint_id AND s.task_id=t.task_id AND q.value->>0=t.idx))

-- name: RENAME_UNPACK_PACKS
-- params: ?1 thread_id, ?2 staged
INSERT OR REPLACE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT t.thread_id,t.checkpoint_ns,t.checkpoint_id,t.task_id,t.task_path,e.value->>0,e.value->>1,COALESCE(e.value->>2,'msgpack'),e.value->>3 FROM writes t CROSS JOIN json_each(substr(t.value,3))e WHERE t.thread_id=? AND substr(t.value,1,2)='p:' AND EXISTS(SELECT 1 FROM writes s WHERE s.thread_id=? AND s.checkpoint_ns=t.checkpoint_ns AND s.checkpoint_id=t.checkpoint_id AND s.task_id=t.task_id)AND NOT EXISTS(SELECT 1 FROM writes s CROSS JOIN json_each(CASE WHEN substr(s.value,1,2)='p:' THEN substr(s.value,3)ELSE json_array(json_array(s.idx))END)q WHERE s.thread_id=?2 AND s.checkpoint_ns=t.checkpoint_ns AND s.checkpoint_id=t.checkpoint_id AND s.task_id=t.task_id AND q.value->>0=e.value->>0)

-- name: RENAME_UNPACK_DROP
-- params: ?1 thread_id, ?2 staged
DELETE FROM writes AS t WHERE t.thread_id=? AND EXISTS(SELECT 1 FROM writes s WHERE s.thread_id=? AND s.checkpoint_ns=t.checkpoint_ns AND s.checkpoint_id=t.checkpoint_id AND s.task_id=t.task_id)AND(substr(t.value,1,2)='p:' OR EXISTS(SELECT 1 FROM writes s CROSS JOIN json_each(CASE WHEN substr(s.value,1,2)='p:' THEN substr(s.value,3)ELSE json_array(json_array(s.idx))END)q WHERE s.thread_id=?2 AND s.checkpoint_ns=t.checkpoint_ns AND s.checkpoint_id=t.checkpoint_id AND s.task_id=t.task_id AND q.value->>0=t.idx))

-- name: RENAME_D1SAVER_CHUNKS
-- params: ?1 thread_id, ?2 staged
UPDATE OR REPLACE d1saver_chunks SET thread_id=? WHERE thread_id=?

-- name: RENAME_CHECKPOINTS
-- params: ?1 thread_id, ?2 staged
UPDATE OR REPLACE checkpoints SET thread_id=? WHERE thread_id=?

-- name: RENAME_WRITES
-- params: ?1 thread_id, ?2 staged
UPDATE OR REPLACE writes SET thread_id=? WHERE thread_id=?

-- name: RENAME_CHUNKS
-- params: ?1 thread_id, ?2 staged
UPDATE OR REPLACE chunks SET thread_id=? WHERE thread_id=?

-- name: RENAME_TAGS
-- params: ?1 thread_id, ?2 staged
UPDATE OR REPLACE tags SET thread_id=? WHERE thread_id=?

-- name: RENAME_DELTA_UNWRITTEN
-- params: ?1 thread_id, ?2 staged
UPDATE OR REPLACE delta_unwritten SET thread_id=? WHERE thread_id=?

-- name: RENAME_DELTA_FROZEN
-- params: ?1 thread_id, ?2 staged
UPDATE OR REPLACE delta_frozen SET thread_id=? WHERE thread_id=?

-- name: SCOPE_THREAD
-- params: ?1 thread_id
INSERT INTO d1saver_scope(thread_id)VALUES(?)

-- name: LEAVE_SCOPE
-- params: ?1 thread_id, ?2 count_d1saver_chunks, ?3 scratch_id, ?4 count_checkpoints, ?5 count_writes, ?6 count_chunks, ?7 count_tags, ?8 count_delta_unwritten, ?9 count_delta_frozen
INSERT INTO d1saver_scope(thread_id)SELECT ? WHERE(SELECT COUNT(*)FROM d1saver_chunks WHERE thread_id=?1)=? AND(SELECT COUNT(*)FROM d1saver_chunks WHERE thread_id=?)=?2 AND(SELECT COUNT(*)FROM checkpoints WHERE thread_id=?1)=? AND(SELECT COUNT(*)FROM checkpoints WHERE thread_id=?3)=?4 AND(SELECT COUNT(*)FROM writes WHERE thread_id=?1)=? AND(SELECT COUNT(*)FROM writes WHERE thread_id=?3)=?5 AND(SELECT COUNT(*)FROM chunks WHERE thread_id=?1)=? AND(SELECT COUNT(*)FROM chunks WHERE thread_id=?3)=?6 AND(SELECT COUNT(*)FROM tags WHERE thread_id=?1)=? AND(SELECT COUNT(*)FROM tags WHERE thread_id=?3)=?7 AND(SELECT COUNT(*)FROM delta_unwritten WHERE thread_id=?1)=? AND(SELECT COUNT(*)FROM delta_unwritten WHERE thread_id=?3)=?8 AND(SELECT COUNT(*)FROM delta_frozen WHERE thread_id=?1)=? AND(SELECT COUNT(*)FROM delta_frozen WHERE thread_id=?3)=?9

-- name: LEAVE_UNLESS_SAME_D1SAVER_CHUNKS
-- params: ?1 thread_id, ?2 scratch_id
DELETE FROM d1saver_scope WHERE EXISTS(SELECT 1 FROM d1saver_chunks a WHERE a.thread_id=? AND NOT EXISTS(SELECT 1 FROM d1saver_chunks b WHERE b.thread_id=? AND b.level IS a.level AND b.id IS a.id AND b.data IS a.data))OR EXISTS(SELECT 1 FROM d1saver_chunks a WHERE a.thread_id=?2 AND NOT EXISTS(SELECT 1 FROM d1saver_chunks b WHERE b.thread_id=?1 AND b.level IS a.level AND b.id IS a.id AND b.data IS a.data))

-- name: LEAVE_UNLESS_SAME_CHECKPOINTS
-- params: ?1 thread_id, ?2 scratch_id
DELETE FROM d1saver_scope WHERE EXISTS(SELECT 1 FROM checkpoints a WHERE a.thread_id=? AND NOT EXISTS(SELECT 1 FROM checkpoints b WHERE b.thread_id=? AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.parent_checkpoint_id IS a.parent_checkpoint_id AND b.type IS a.type AND b.checkpoint IS a.checkpoint AND b.metadata IS a.metadata AND b.channels IS a.channels AND b.run_id IS a.run_id AND b.ts IS a.ts))OR EXISTS(SELECT 1 FROM checkpoints a WHERE a.thread_id=?2 AND NOT EXISTS(SELECT 1 FROM checkpoints b WHERE b.thread_id=?1 AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.parent_checkpoint_id IS a.parent_checkpoint_id AND b.type IS a.type AND b.checkpoint IS a.checkpoint AND b.metadata IS a.metadata AND b.channels IS a.channels AND b.run_id IS a.run_id AND b.ts IS a.ts))

-- name: LEAVE_UNLESS_SAME_WRITES
-- params: ?1 thread_id, ?2 scratch_id
DELETE FROM d1saver_scope WHERE EXISTS(SELECT 1 FROM writes a WHERE a.thread_id=? AND NOT EXISTS(SELECT 1 FROM writes b WHERE b.thread_id=? AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.task_path IS a.task_path AND b.channel IS a.channel AND b.type IS a.type AND b.value IS a.value))OR EXISTS(SELECT 1 FROM writes a WHERE a.thread_id=?2 AND NOT EXISTS(SELECT 1 FROM writes b WHERE b.thread_id=?1 AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.task_path IS a.task_path AND b.channel IS a.channel AND b.type IS a.type AND b.value IS a.value))

-- name: LEAVE_UNLESS_SAME_CHUNKS
-- params: ?1 thread_id, ?2 scratch_id
DELETE FROM d1saver_scope WHERE EXISTS(SELECT 1 FROM chunks a WHERE a.thread_id=? AND NOT EXISTS(SELECT 1 FROM chunks b WHERE b.thread_id=? AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.owner IS a.owner AND b.seq IS a.seq AND b.data IS a.data))OR EXISTS(SELECT 1 FROM chunks a WHERE a.thread_id=?2 AND NOT EXISTS(SELECT 1 FROM chunks b WHERE b.thread_id=?1 AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.owner IS a.owner AND b.seq IS a.seq AND b.data IS a.data))

-- name: LEAVE_UNLESS_SAME_TAGS
-- params: ?1 thread_id, ?2 scratch_id
DELETE FROM d1saver_scope WHERE EXISTS(SELECT 1 FROM tags a WHERE a.thread_id=? AND NOT EXISTS(SELECT 1 FROM tags b WHERE b.thread_id=? AND b.checkpoint_ns IS a.checkpoint_ns AND b.name IS a.name AND b.checkpoint_id IS a.checkpoint_id AND b.created_at IS a.created_at))OR EXISTS(SELECT 1 FROM tags a WHERE a.thread_id=?2 AND NOT EXISTS(SELECT 1 FROM tags b WHERE b.thread_id=?1 AND b.checkpoint_ns IS a.checkpoint_ns AND b.name IS a.name AND b.checkpoint_id IS a.checkpoint_id AND b.created_at IS a.created_at))

-- name: LEAVE_UNLESS_SAME_DELTA_UNWRITTEN
-- params: ?1 thread_id, ?2 scratch_id
DELETE FROM d1saver_scope WHERE EXISTS(SELECT 1 FROM delta_unwritten a WHERE a.thread_id=? AND NOT EXISTS(SELECT 1 FROM delta_unwritten b WHERE b.thread_id=? AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.channels IS a.channels))OR EXISTS(SELECT 1 FROM delta_unwritten a WHERE a.thread_id=?2 AND NOT EXISTS(SELECT 1 FROM delta_unwritten b WHERE b.thread_id=?1 AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.channels IS a.channels))

-- name: LEAVE_UNLESS_SAME_DELTA_FROZEN
-- params: ?1 thread_id, ?2 scratch_id
DELETE FROM d1saver_scope WHERE EXISTS(SELECT 1 FROM delta_frozen a WHERE a.thread_id=? AND NOT EXISTS(SELECT 1 FROM delta_frozen b WHERE b.thread_id=? AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.channel IS a.channel AND b.kind IS a.kind AND b.depth IS a.depth AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.src_checkpoint_id IS a.src_checkpoint_id AND b.task_path IS a.task_path AND b.type IS a.type AND b.value IS a.value AND b.metadata IS a.metadata AND b.channels IS a.channels AND b.parent IS a.parent))OR EXISTS(SELECT 1 FROM delta_frozen a WHERE a.thread_id=?2 AND NOT EXISTS(SELECT 1 FROM delta_frozen b WHERE b.thread_id=?1 AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.channel IS a.channel AND b.kind IS a.kind AND b.depth IS a.depth AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.src_checkpoint_id IS a.src_checkpoint_id AND b.task_path IS a.task_path AND b.type IS a.type AND b.value IS a.value AND b.metadata IS a.metadata AND b.channels IS a.channels AND b.parent IS a.parent))

-- name: LEAVING
SELECT COUNT(*)moved FROM d1saver_scope

-- name: LEAVE_DELTA_FROZEN
DELETE FROM delta_frozen WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)

-- name: LEAVE_DELTA_UNWRITTEN
DELETE FROM delta_unwritten WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)

-- name: LEAVE_TAGS
DELETE FROM tags WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)

-- name: LEAVE_CHUNKS
DELETE FROM chunks WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)

-- name: LEAVE_WRITES
DELETE FROM writes WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)

-- name: LEAVE_CHECKPOINTS
DELETE FROM checkpoints WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)

-- name: LEAVE_D1SAVER_CHUNKS
DELETE FROM d1saver_chunks WHERE thread_id IN(SELECT thread_id FROM d1saver_scope)

-- name: DROP_THREAD_DELTA_FROZEN
-- params: ?1 thread_id
DELETE FROM delta_frozen WHERE thread_id=?

-- name: DROP_THREAD_DELTA_UNWRITTEN
-- params: ?1 thread_id
DELETE FROM delta_unwritten WHERE thread_id=?

-- name: DROP_THREAD_TAGS
-- params: ?1 thread_id
DELETE FROM tags WHERE thread_id=?

-- name: DROP_THREAD_CHUNKS
-- params: ?1 thread_id
DELETE FROM chunks WHERE thread_id=?

-- name: DROP_THREAD_WRITES
-- params: ?1 thread_id
DELETE FROM writes WHERE thread_id=?

-- name: DROP_THREAD_CHECKPOINTS
-- params: ?1 thread_id
DELETE FROM checkpoints WHERE thread_id=?

-- name: DROP_THREAD_D1SAVER_CHUNKS
-- params: ?1 thread_id
DELETE FROM d1saver_chunks WHERE thread_id=?

-- name: THREADS_IN_RANGE
-- params: ?1 low, ?2 high
SELECT thread_id FROM checkpoints WHERE thread_id>=? AND thread_id<? UNION SELECT thread_id FROM writes WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM chunks WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM tags WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM(SELECT thread_id FROM d1saver_chunks WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM delta_unwritten WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM delta_frozen WHERE thread_id>=?1 AND thread_id<?2)ORDER BY thread_id

-- name: BEGIN_MOVE
-- params: ?1 thread_id, ?2 move_id
INSERT OR REPLACE INTO d1saver_moves(thread_id,move_id,created_at)VALUES(?,?,CAST(strftime('%s','now')AS INTEGER))

-- name: CHECK_MOVE
-- params: ?1 thread_id, ?2 move_id
INSERT INTO d1saver_move_guards(move_voided)SELECT 1 WHERE NOT EXISTS(SELECT 1 FROM d1saver_moves WHERE thread_id=? AND move_id=?)

-- name: END_MOVE
-- params: ?1 thread_id, ?2 move_id
DELETE FROM d1saver_moves WHERE thread_id=? AND move_id=?

-- name: CLEAR_MOVES
DELETE FROM d1saver_moves

-- name: MOVES_REGISTERED
SELECT COUNT(*)moves FROM d1saver_moves

-- name: STAGE
-- params: ?1 staging_id, ?2 thread_id, ?3 source_id, ?4 seconds
INSERT INTO d1saver_staged(staging_id,thread_id,source_id,created_at,expires_at)VALUES(?,?,?,CAST(strftime('%s','now')AS INTEGER),CAST(strftime('%s','now')AS INTEGER)+ CAST(? AS INTEGER))ON CONFLICT(staging_id)DO UPDATE SET thread_id=excluded.thread_id,source_id=excluded.source_id,expires_at=excluded.expires_at

-- name: STAGING_HELD
-- params: ?1 staging_id
INSERT INTO d1saver_move_guards(staging_lost)SELECT 1 WHERE NOT EXISTS(SELECT 1 FROM d1saver_staged WHERE staging_id=?)

-- name: UNSTAGE
-- params: ?1 staging_id
DELETE FROM d1saver_staged WHERE staging_id=?

-- name: STAGE_ELSEWHERE
-- params: ?1 source_id, ?2 database_id, ?3 staging_id, ?4 seconds
INSERT OR REPLACE INTO d1saver_staged_elsewhere(source_id,database_id,staging_id,expires_at)VALUES(?,?,?,CAST(strftime('%s','now')AS INTEGER)+ CAST(? AS INTEGER))

-- name: UNSTAGE_ELSEWHERE
-- params: ?1 source_id, ?2 database_id, ?3 staging_id
DELETE FROM d1saver_staged_elsewhere WHERE source_id=? AND database_id=? AND staging_id=?

-- name: LEFTOVERS
-- params: ?1 low, ?2 high
SELECT t.thread_id,s.thread_id target,s.source_id source,CASE WHEN s.staging_id IS NULL OR s.expires_at<CAST(strftime('%s','now')AS INTEGER)THEN 1 ELSE 0 END expired FROM(SELECT thread_id FROM(SELECT thread_id FROM checkpoints WHERE thread_id>=? AND thread_id<? UNION SELECT thread_id FROM writes WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM chunks WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM tags WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM(SELECT thread_id FROM d1saver_chunks WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM delta_unwritten WHERE thread_id>=?1 AND thread_id<?2 UNION SELECT thread_id FROM delta_frozen WHERE thread_id>=?1 AND thread_id<?2)))t LEFT JOIN d1saver_staged s ON s.staging_id=t.thread_id ORDER BY t.thread_id

-- name: RAW_CHECKPOINTS_THREAD
-- params: ?1 thread_id, ?2 after_thread_id, ?3 after_checkpoint_ns, ?4 after_checkpoint_id, ?5 heads, ?6 limit, ?7 content
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts FROM checkpoints c WHERE thread_id=? AND(thread_id,checkpoint_ns,checkpoint_id)>(?,?,?)AND(? IS NULL OR substr(COALESCE(CASE WHEN substr(c.checkpoint,1,2)='c:' THEN(SELECT k.data FROM chunks k WHERE k.thread_id=c.thread_id AND k.checkpoint_ns=c.checkpoint_ns AND k.checkpoint_id=c.checkpoint_id AND k.owner='' AND k.seq=0)ELSE c.checkpoint END,''),1,7)NOT IN(SELECT value FROM json_each(?5)))ORDER BY thread_id,checkpoint_ns,checkpoint_id LIMIT ?),vals(thread_id,v)AS(SELECT thread_id,checkpoint FROM page WHERE ?=1),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT 'c' kind,thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint value,metadata,channels,run_id,ts,NULL owner,NULL seq FROM page UNION ALL SELECT 'k',k.thread_id,k.checkpoint_ns,k.checkpoint_id,NULL,NULL,k.data,NULL,NULL,NULL,NULL,k.owner,k.seq FROM page p JOIN chunks k ON k.thread_id=p.thread_id AND k.checkpoint_ns=p.checkpoint_ns AND k.checkpoint_id=p.checkpoint_id AND k.owner IN('',':metadata')UNION ALL SELECT 'h',r.thread_id,NULL,NULL,NULL,NULL,k.data,NULL,NULL,NULL,NULL,r.id,NULL FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)

-- name: RAW_CHECKPOINTS_ALL
-- params: ?1 after_thread_id, ?2 after_checkpoint_ns, ?3 after_checkpoint_id, ?4 heads, ?5 limit, ?6 content
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts FROM checkpoints c WHERE(thread_id,checkpoint_ns,checkpoint_id)>(?,?,?)AND substr(thread_id,1,9)<>char(31)||'d1saver-' AND(? IS NULL OR substr(COALESCE(CASE WHEN substr(c.checkpoint,1,2)='c:' THEN(SELECT k.data FROM chunks k WHERE k.thread_id=c.thread_id AND k.checkpoint_ns=c.checkpoint_ns AND k.checkpoint_id=c.checkpoint_id AND k.owner='' AND k.seq=0)ELSE c.checkpoint END,''),1,7)NOT IN(SELECT value FROM json_each(?4)))ORDER BY thread_id,checkpoint_ns,checkpoint_id LIMIT ?),vals(thread_id,v)AS(SELECT thread_id,checkpoint FROM page WHERE ?=1),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT 'c' kind,thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint value,metadata,channels,run_id,ts,NULL owner,NULL seq FROM page UNION ALL SELECT 'k',k.thread_id,k.checkpoint_ns,k.checkpoint_id,NULL,NULL,k.data,NULL,NULL,NULL,NULL,k.owner,k.seq FROM page p JOIN chunks k ON k.thread_id=p.thread_id AND k.checkpoint_ns=p.checkpoint_ns AND k.checkpoint_id=p.checkpoint_id AND k.owner IN('',':metadata')UNION ALL SELECT 'h',r.thread_id,NULL,NULL,NULL,NULL,k.data,NULL,NULL,NULL,NULL,r.id,NULL FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)

-- name: RAW_WRITES_THREAD
-- params: ?1 thread_id, ?2 after_thread_id, ?3 after_checkpoint_ns, ?4 after_checkpoint_id, ?5 after_task_id, ?6 after_idx, ?7 heads, ?8 limit, ?9 content
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value FROM writes w WHERE thread_id=? AND(thread_id,checkpoint_ns,checkpoint_id,task_id,idx)>(?,?,?,?,?)AND(? IS NULL OR(w.value IS NOT NULL AND substr(COALESCE(CASE WHEN substr(w.value,1,2)='c:' THEN(SELECT k.data FROM chunks k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.checkpoint_id AND k.owner=w.task_id||'/'||w.idx AND k.seq=0)ELSE w.value END,''),1,7)NOT IN(SELECT value FROM json_each(?7))))ORDER BY thread_id,checkpoint_ns,checkpoint_id,task_id,idx LIMIT ?),vals(thread_id,v)AS(SELECT thread_id,value FROM page WHERE ?=1),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT 'w' kind,thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value,NULL owner,NULL seq FROM page UNION ALL SELECT 'k',k.thread_id,k.checkpoint_ns,k.checkpoint_id,NULL,NULL,NULL,NULL,NULL,k.data,k.owner,k.seq FROM page p JOIN chunks k ON k.thread_id=p.thread_id AND k.checkpoint_ns=p.checkpoint_ns AND k.checkpoint_id=p.checkpoint_id AND k.owner=p.task_id||'/'||p.idx UNION ALL SELECT 'h',r.thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,k.data,r.id,NULL FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)

-- name: RAW_WRITES_ALL
-- params: ?1 after_thread_id, ?2 after_checkpoint_ns, ?3 after_checkpoint_id, ?4 after_task_id, ?5 after_idx, ?6 heads, ?7 limit, ?8 content
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value FROM writes w WHERE(thread_id,checkpoint_ns,checkpoint_id,task_id,idx)>(?,?,?,?,?)AND substr(thread_id,1,9)<>char(31)||'d1saver-' AND(? IS NULL OR(w.value IS NOT NULL AND substr(COALESCE(CASE WHEN substr(w.value,1,2)='c:' THEN(SELECT k.data FROM chunks k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.checkpoint_id AND k.owner=w.task_id||'/'||w.idx AND k.seq=0)ELSE w.value END,''),1,7)NOT IN(SELECT value FROM json_each(?6))))ORDER BY thread_id,checkpoint_ns,checkpoint_id,task_id,idx LIMIT ?),vals(thread_id,v)AS(SELECT thread_id,value FROM page WHERE ?=1),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT 'w' kind,thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value,NULL owner,NULL seq FROM page UNION ALL SELECT 'k',k.thread_id,k.checkpoint_ns,k.checkpoint_id,NULL,NULL,NULL,NULL,NULL,k.data,k.owner,k.seq FROM page p JOIN chunks k ON k.thread_id=p.thread_id AND k.checkpoint_ns=p.checkpoint_ns AND k.checkpoint_id=p.checkpoint_id AND k.owner=p.task_id||'/'||p.idx UNION ALL SELECT 'h',r.thread_id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,k.data,r.id,NULL FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)

-- name: RAW_FROZEN_THREAD
-- params: ?1 thread_id, ?2 after_thread_id, ?3 after_checkpoint_ns, ?4 after_checkpoint_id, ?5 after_channel, ?6 after_kind, ?7 after_depth, ?8 after_task_id, ?9 after_idx, ?10 heads, ?11 limit, ?12 content
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent FROM delta_frozen f WHERE thread_id=? AND(thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx)>(?,?,?,?,?,?,?,?)AND(? IS NULL OR(f.kind<>'c' AND f.value IS NOT NULL AND substr(COALESCE(CASE WHEN substr(f.value,1,2)='c:' THEN(SELECT k.data FROM chunks k WHERE k.thread_id=f.thread_id AND k.checkpoint_ns=f.checkpoint_ns AND k.checkpoint_id=f.checkpoint_id AND k.owner='f/'||f.src_checkpoint_id||'/'||CASE f.kind WHEN 'w' THEN f.task_id||'/'||f.idx ELSE '' END AND k.seq=0)ELSE f.value END,''),1,7)NOT IN(SELECT value FROM json_each(?10))))ORDER BY thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx LIMIT ?),vals(thread_id,v)AS(SELECT thread_id,value FROM page WHERE ?=1),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT 'f' kind,thread_id,checkpoint_ns,checkpoint_id,channel,kind fkind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent FROM page UNION ALL SELECT 'k',k.thread_id,k.checkpoint_ns,k.checkpoint_id,k.owner,NULL,k.seq,NULL,NULL,NULL,NULL,NULL,k.data,NULL,NULL,NULL FROM(SELECT DISTINCT thread_id,checkpoint_ns,checkpoint_id FROM page)h JOIN chunks k ON k.thread_id=h.thread_id AND k.checkpoint_ns=h.checkpoint_ns AND k.checkpoint_id=h.checkpoint_id AND substr(k.owner,1,2)='f/' UNION ALL SELECT 'h',r.thread_id,NULL,NULL,r.id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,k.data,NULL,NULL,NULL FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)

-- name: RAW_FROZEN_ALL
-- params: ?1 after_thread_id, ?2 after_checkpoint_ns, ?3 after_checkpoint_id, ?4 after_channel, ?5 after_kind, ?6 after_depth, ?7 after_task_id, ?8 after_idx, ?9 heads, ?10 limit, ?11 content
WITH RECURSIVE page AS(SELECT thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent FROM delta_frozen f WHERE(thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx)>(?,?,?,?,?,?,?,?)AND substr(thread_id,1,9)<>char(31)||'d1saver-' AND(? IS NULL OR(f.kind<>'c' AND f.value IS NOT NULL AND substr(COALESCE(CASE WHEN substr(f.value,1,2)='c:' THEN(SELECT k.data FROM chunks k WHERE k.thread_id=f.thread_id AND k.checkpoint_ns=f.checkpoint_ns AND k.checkpoint_id=f.checkpoint_id AND k.owner='f/'||f.src_checkpoint_id||'/'||CASE f.kind WHEN 'w' THEN f.task_id||'/'||f.idx ELSE '' END AND k.seq=0)ELSE f.value END,''),1,7)NOT IN(SELECT value FROM json_each(?9))))ORDER BY thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx LIMIT ?),vals(thread_id,v)AS(SELECT thread_id,value FROM page WHERE ?=1),refs(thread_id,id)AS(SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='m:' THEN '["'||replace(substr(o.v,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT o.thread_id,ltrim(j.value,'^')FROM vals o,json_each(CASE WHEN substr(o.v,1,2)='p:' THEN substr(o.v,3)ELSE '[]' END)w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 UNION SELECT r.thread_id,ltrim(j.value,'^')FROM refs r CROSS JOIN d1saver_chunks n USING(thread_id,id),json_each('["'||replace(n.data,',','","')||'"]')j WHERE n.level>0)SELECT 'f' kind,thread_id,checkpoint_ns,checkpoint_id,channel,kind fkind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent FROM page UNION ALL SELECT 'k',k.thread_id,k.checkpoint_ns,k.checkpoint_id,k.owner,NULL,k.seq,NULL,NULL,NULL,NULL,NULL,k.data,NULL,NULL,NULL FROM(SELECT DISTINCT thread_id,checkpoint_ns,checkpoint_id FROM page)h JOIN chunks k ON k.thread_id=h.thread_id AND k.checkpoint_ns=h.checkpoint_ns AND k.checkpoint_id=h.checkpoint_id AND substr(k.owner,1,2)='f/' UNION ALL SELECT 'h',r.thread_id,NULL,NULL,r.id,NULL,NULL,NULL,NULL,NULL,NULL,NULL,k.data,NULL,NULL,NULL FROM refs r CROSS JOIN d1saver_chunks k USING(thread_id,id)

-- name: INSERT_FROZEN
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 channel, ?5 kind, ?6 depth, ?7 task_id, ?8 idx, ?9 src_checkpoint_id, ?10 task_path, ?11 type, ?12 value, ?13 metadata, ?14 channels, ?15 parent
INSERT OR REPLACE INTO delta_frozen(thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx,src_checkpoint_id,task_path,type,value,metadata,channels,parent)VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)

-- name: REKEY_GUARD_CHECKPOINT
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 checkpoint_fp, ?5 metadata_fp, ?6 checkpoint_pieces_fp, ?7 metadata_pieces_fp
INSERT INTO d1saver_guard(head_moved)SELECT 1 WHERE NOT EXISTS(SELECT 1 FROM checkpoints WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=? AND length(checkpoint)||':'||substr(checkpoint,1,40)||substr(checkpoint,-40)IS ? AND length(metadata)||':'||substr(metadata,1,40)||substr(metadata,-40)IS ?)OR(SELECT COUNT(*)||':'||SUM(length(data))||':'||MAX(CASE WHEN seq=0 THEN substr(data,1,40)||substr(data,-40)END)FROM chunks WHERE thread_id=?1 AND checkpoint_ns=?2 AND checkpoint_id=?3 AND owner='')IS NOT ? OR(SELECT COUNT(*)||':'||SUM(length(data))||':'||MAX(CASE WHEN seq=0 THEN substr(data,1,40)||substr(data,-40)END)FROM chunks WHERE thread_id=?1 AND checkpoint_ns=?2 AND checkpoint_id=?3 AND owner=':metadata')IS NOT ?

-- name: REKEY_GUARD_WRITE
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 task_id, ?5 idx, ?6 value_fp, ?7 pieces_fp
INSERT INTO d1saver_guard(head_moved)SELECT 1 WHERE NOT EXISTS(SELECT 1 FROM writes WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=? AND task_id=? AND idx=? AND length(value)||':'||substr(value,1,40)||substr(value,-40)IS ?)OR(SELECT COUNT(*)||':'||SUM(length(data))||':'||MAX(CASE WHEN seq=0 THEN substr(data,1,40)||substr(data,-40)END)FROM chunks WHERE thread_id=?1 AND checkpoint_ns=?2 AND checkpoint_id=?3 AND owner=?4||'/'||CAST(?5 AS INTEGER))IS NOT ?

-- name: REKEY_GUARD_FROZEN
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 channel, ?5 kind, ?6 depth, ?7 task_id, ?8 idx, ?9 value_fp, ?10 owner, ?11 pieces_fp
INSERT INTO d1saver_guard(head_moved)SELECT 1 WHERE NOT EXISTS(SELECT 1 FROM delta_frozen WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=? AND channel=? AND kind=? AND depth=? AND task_id=? AND idx=? AND length(value)||':'||substr(value,1,40)||substr(value,-40)IS ?)OR(SELECT COUNT(*)||':'||SUM(length(data))||':'||MAX(CASE WHEN seq=0 THEN substr(data,1,40)||substr(data,-40)END)FROM chunks WHERE thread_id=?1 AND checkpoint_ns=?2 AND checkpoint_id=?3 AND owner=?)IS NOT ?

-- name: REKEY_FROZEN
-- params: ?1 value, ?2 metadata, ?3 thread_id, ?4 checkpoint_ns, ?5 checkpoint_id, ?6 channel, ?7 kind, ?8 depth, ?9 task_id, ?10 idx
UPDATE delta_frozen SET value=?,metadata=? WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=? AND channel=? AND kind=? AND depth=? AND task_id=? AND idx=?

-- name: REKEY_CHECKPOINT
-- params: ?1 checkpoint, ?2 metadata, ?3 thread_id, ?4 checkpoint_ns, ?5 checkpoint_id
UPDATE checkpoints SET checkpoint=?,metadata=? WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?

-- name: REKEY_DROP_WRITE
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 task_id, ?5 idx
DELETE FROM writes WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=? AND task_id=? AND idx=?

-- name: REKEY_ADD_WRITE
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id, ?4 task_id, ?5 task_path, ?6 idx, ?7 channel, ?8 type, ?9 value
INSERT OR IGNORE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)VALUES(?,?,?,?,?,?,?,?,?)

-- name: REKEY_WRITE
-- params: ?1 value, ?2 thread_id, ?3 checkpoint_ns, ?4 checkpoint_id, ?5 task_id, ?6 idx
UPDATE writes SET value=? WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=? AND task_id=? AND idx=?

-- name: KEY_CENSUS
SELECT 'checkpoints' tbl,CASE WHEN substr(v,1,2)='e:' THEN substr(v,1,7)END head,COUNT(*)row_count FROM(SELECT CASE WHEN substr(c.checkpoint,1,2)='c:' THEN(SELECT k.data FROM chunks k WHERE k.thread_id=c.thread_id AND k.checkpoint_ns=c.checkpoint_ns AND k.checkpoint_id=c.checkpoint_id AND k.owner='' AND k.seq=0)ELSE c.checkpoint END v FROM checkpoints c WHERE substr(c.thread_id,1,9)<>char(31)||'d1saver-')GROUP BY CASE WHEN substr(v,1,2)='e:' THEN substr(v,1,7)END UNION ALL SELECT 'writes',CASE WHEN substr(v,1,2)='e:' THEN substr(v,1,7)END,COUNT(*)FROM(SELECT CASE WHEN substr(w.value,1,2)='c:' THEN(SELECT k.data FROM chunks k WHERE k.thread_id=w.thread_id AND k.checkpoint_ns=w.checkpoint_ns AND k.checkpoint_id=w.checkpoint_id AND k.owner=w.task_id||'/'||w.idx AND k.seq=0)ELSE w.value END v FROM writes w WHERE w.value IS NOT NULL AND substr(w.thread_id,1,9)<>char(31)||'d1saver-')GROUP BY CASE WHEN substr(v,1,2)='e:' THEN substr(v,1,7)END UNION ALL SELECT 'delta_frozen',CASE WHEN substr(v,1,2)='e:' THEN substr(v,1,7)END,COUNT(*)FROM(SELECT CASE WHEN substr(f.value,1,2)='c:' THEN(SELECT k.data FROM chunks k WHERE k.thread_id=f.thread_id AND k.checkpoint_ns=f.checkpoint_ns AND k.checkpoint_id=f.checkpoint_id AND k.owner='f/'||f.src_checkpoint_id||'/'||CASE f.kind WHEN 'w' THEN f.task_id||'/'||f.idx ELSE '' END AND k.seq=0)ELSE f.value END v FROM delta_frozen f WHERE f.kind<>'c' AND f.value IS NOT NULL AND substr(f.thread_id,1,9)<>char(31)||'d1saver-')GROUP BY CASE WHEN substr(v,1,2)='e:' THEN substr(v,1,7)END

-- name: STAGED_VALUES
SELECT(SELECT COUNT(*)FROM checkpoints WHERE thread_id>=char(31)||'d1saver-' AND thread_id<char(31)||'d1saver.')+(SELECT COUNT(*)FROM writes WHERE thread_id>=char(31)||'d1saver-' AND thread_id<char(31)||'d1saver.' AND value IS NOT NULL)+(SELECT COUNT(*)FROM delta_frozen WHERE thread_id>=char(31)||'d1saver-' AND thread_id<char(31)||'d1saver.' AND kind<>'c' AND value IS NOT NULL)row_count

-- name: PUT_ITEMS
-- params: ?1 now, ?2 rows
INSERT INTO store_items(ns,key,value,created_at,updated_at,expires_at,ttl_minutes)SELECT j.value->>0,j.value->>1,j.value->>2,?,?1,j.value->>3,j.value->>4 FROM json_each(?)j WHERE 1 ON CONFLICT(ns,key)DO UPDATE SET value=excluded.value,created_at=CASE WHEN store_items.expires_at IS NOT NULL AND store_items.expires_at<=excluded.updated_at THEN excluded.created_at ELSE store_items.created_at END,updated_at=excluded.updated_at,expires_at=excluded.expires_at,ttl_minutes=excluded.ttl_minutes

-- name: DELETE_ITEMS
-- params: ?1 keys
DELETE FROM store_items WHERE(ns,key)IN(SELECT value->>0,value->>1 FROM json_each(?))

-- name: DELETE_VECTORS
-- params: ?1 keys
DELETE FROM store_vectors WHERE(ns,key)IN(SELECT value->>0,value->>1 FROM json_each(?))

-- name: PUT_VECTORS
-- params: ?1 rows
INSERT OR REPLACE INTO store_vectors(ns,key,field,vector,code)SELECT value->>0,value->>1,value->>2,value->>3,value->>4 FROM json_each(?)

-- name: GET_ITEMS
-- params: ?1 keys, ?2 live_at
SELECT s.ns,s.key,s.value,s.created_at,s.updated_at,s.ttl_minutes FROM json_each(?)j JOIN store_items s ON s.ns=j.value->>0 AND s.key=j.value->>1 WHERE(s.expires_at IS NULL OR ? IS NULL OR s.expires_at>?2)

-- name: REFRESH_ITEMS
-- params: ?1 now, ?2 keys, ?3 live_at
UPDATE store_items SET expires_at=? + ttl_minutes * 60 WHERE(ns,key)IN(SELECT value->>0,value->>1 FROM json_each(?))AND ttl_minutes IS NOT NULL AND(expires_at IS NULL OR ? IS NULL OR expires_at>?3)

-- name: RESTORE_CREATED
-- params: ?1 created_at, ?2 ns, ?3 key, ?4 put_at
UPDATE store_items SET created_at=? WHERE ns=? AND key=? AND created_at=?

-- name: SEARCH_ITEMS
-- params: ?1 exact, ?2 low, ?3 high, ?4 live_at, ?5 limit, ?6 offset
SELECT ns,key,value,created_at,updated_at,ttl_minutes FROM store_items WHERE(? IS NULL OR ns=?1 OR(ns>=? AND ns<?))AND(expires_at IS NULL OR ? IS NULL OR expires_at>?4)ORDER BY updated_at DESC,ns,key LIMIT CAST(? AS INTEGER)OFFSET CAST(? AS INTEGER)

-- name: REFRESH_SEARCH
-- params: ?1 now, ?2 exact, ?3 low, ?4 high, ?5 live_at, ?6 limit, ?7 offset
UPDATE store_items SET expires_at=? + ttl_minutes * 60 WHERE rowid IN(SELECT rowid FROM store_items WHERE(? IS NULL OR ns=?2 OR(ns>=? AND ns<?))AND(expires_at IS NULL OR ? IS NULL OR expires_at>?5)ORDER BY updated_at DESC,ns,key LIMIT CAST(? AS INTEGER)OFFSET CAST(? AS INTEGER))AND ttl_minutes IS NOT NULL

-- name: SEARCH_ITEMS_FILTERED
-- params: ?1 filter, ?2 exact, ?3 low, ?4 high, ?5 live_at, ?6 need, ?7 skip
WITH equals AS MATERIALIZED(SELECT value->>'k' k,value->>'p' p,value->>'a' a FROM json_each(?)WHERE value->>'k' IN('text','num')AND value->>'n' IS NULL),scoped AS MATERIALIZED(SELECT rowid row_id,ns,key,updated_at,(CASE WHEN ?1 IS NULL THEN 2 WHEN substr(store_items.value,1,1)<>'{' THEN 1 ELSE(WITH conds AS MATERIALIZED(SELECT value->>'k' k,value->>'n' n,value->>'a' a,value->>'v' v,value->>'o' o,value->>'s' s,value->>'p' p FROM json_each(?1))SELECT min(CASE WHEN c.n=1 THEN 2 - c.r ELSE c.r END)FROM(SELECT d.n,CASE d.k WHEN 'unknown' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 0 WHEN 'object' THEN CASE WHEN d.type='object' THEN 2 ELSE 0 END WHEN 'array' THEN CASE WHEN d.type='array' AND json_array_length(store_items.value,d.p)=d.a THEN 2 ELSE 0 END WHEN 'keys' THEN CASE WHEN d.type='object' AND(SELECT count(*)FROM json_each(store_items.value,d.p))=d.a THEN 2 ELSE 0 END WHEN 'none' THEN CASE WHEN d.type IS NULL OR d.type='null' THEN 2 ELSE 0 END WHEN 'null' THEN CASE WHEN d.type='null' THEN 2 ELSE 0 END WHEN 'text' THEN CASE WHEN d.type='text' AND d.x=d.a THEN 2 ELSE 0 END WHEN 'text?' THEN CASE WHEN d.type='text' THEN 1 ELSE 0 END WHEN 'num' THEN CASE WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN instr(d.a,'|'||d.raw||'|')>0 THEN 2 WHEN d.type='real' AND abs(d.x - d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 ELSE 0 END WHEN 'cmp' THEN CASE WHEN d.type='text' OR(d.type='integer' AND typeof(d.x)<>'integer')THEN 1 WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN d.type='real' AND instr(d.a,'|'||d.raw||'|')>0 THEN CASE WHEN d.o IN('gte','lte')THEN 2 ELSE 0 END WHEN(d.type='real' OR d.s=0)AND abs(CAST(d.x AS REAL)- d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 WHEN CASE d.o WHEN 'gt' THEN CAST(d.x AS REAL)>d.v WHEN 'gte' THEN CAST(d.x AS REAL)>=d.v WHEN 'lt' THEN CAST(d.x AS REAL)<d.v ELSE CAST(d.x AS REAL)<=d.v END THEN 2 ELSE 0 END WHEN 'numtype' THEN CASE WHEN d.type IN('real','true','false')OR(d.type='integer' AND typeof(d.x)='integer')THEN d.a WHEN d.type IN('text','integer')THEN 1 ELSE 0 END WHEN 'notcontainer' THEN CASE WHEN d.type=d.a THEN 1 ELSE 2 END ELSE 1 END r FROM(SELECT f.k,f.n,f.a,f.v,f.o,f.s,f.p,json_type(store_items.value,f.p)type,json_extract(store_items.value,f.p)x,store_items.value ->f.p raw FROM conds f LIMIT -1)d LIMIT -1)c)END)verdict FROM store_items WHERE(? IS NULL OR ns=?2 OR(ns>=? AND ns<?))AND(expires_at IS NULL OR ? IS NULL OR expires_at>?5)AND(CASE WHEN substr(store_items.value,1,1)<>'{' THEN 1 ELSE NOT EXISTS(SELECT 1 FROM equals e WHERE CASE e.k WHEN 'text' THEN json_extract(store_items.value,e.p)IS NOT e.a ELSE coalesce(instr(e.a,'|'||(store_items.value ->e.p)||'|'),0)=0 AND json_type(store_items.value,e.p)IS NOT 'real' END)END)),counted AS(SELECT row_id,verdict,count(*)FILTER(WHERE verdict=2)OVER page -(verdict=2)sure_before,count(*)FILTER(WHERE verdict=1)OVER page unsure_upto FROM scoped WHERE verdict>0 WINDOW page AS(ORDER BY updated_at DESC,ns,key ROWS UNBOUNDED PRECEDING))SELECT s.ns,s.key,s.value,s.created_at,s.updated_at,s.ttl_minutes,c.verdict,c.sure_before,c.unsure_upto FROM counted c JOIN store_items s ON s.rowid=c.row_id WHERE(?<0 OR c.sure_before<?6)AND NOT(c.verdict=2 AND c.unsure_upto=0 AND c.sure_before<?)ORDER BY s.updated_at DESC,s.ns,s.key

-- name: REFRESH_SEARCH_FILTERED
-- params: ?1 now, ?2 filter, ?3 exact, ?4 low, ?5 high, ?6 live_at, ?7 skip, ?8 need
UPDATE store_items SET expires_at=? + ttl_minutes * 60 WHERE ttl_minutes IS NOT NULL AND rowid IN(WITH equals AS MATERIALIZED(SELECT value->>'k' k,value->>'p' p,value->>'a' a FROM json_each(?)WHERE value->>'k' IN('text','num')AND value->>'n' IS NULL),scoped AS MATERIALIZED(SELECT rowid row_id,ns,key,updated_at,(CASE WHEN ?2 IS NULL THEN 2 WHEN substr(store_items.value,1,1)<>'{' THEN 1 ELSE(WITH conds AS MATERIALIZED(SELECT value->>'k' k,value->>'n' n,value->>'a' a,value->>'v' v,value->>'o' o,value->>'s' s,value->>'p' p FROM json_each(?2))SELECT min(CASE WHEN c.n=1 THEN 2 - c.r ELSE c.r END)FROM(SELECT d.n,CASE d.k WHEN 'unknown' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 0 WHEN 'object' THEN CASE WHEN d.type='object' THEN 2 ELSE 0 END WHEN 'array' THEN CASE WHEN d.type='array' AND json_array_length(store_items.value,d.p)=d.a THEN 2 ELSE 0 END WHEN 'keys' THEN CASE WHEN d.type='object' AND(SELECT count(*)FROM json_each(store_items.value,d.p))=d.a THEN 2 ELSE 0 END WHEN 'none' THEN CASE WHEN d.type IS NULL OR d.type='null' THEN 2 ELSE 0 END WHEN 'null' THEN CASE WHEN d.type='null' THEN 2 ELSE 0 END WHEN 'text' THEN CASE WHEN d.type='text' AND d.x=d.a THEN 2 ELSE 0 END WHEN 'text?' THEN CASE WHEN d.type='text' THEN 1 ELSE 0 END WHEN 'num' THEN CASE WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN instr(d.a,'|'||d.raw||'|')>0 THEN 2 WHEN d.type='real' AND abs(d.x - d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 ELSE 0 END WHEN 'cmp' THEN CASE WHEN d.type='text' OR(d.type='integer' AND typeof(d.x)<>'integer')THEN 1 WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN d.type='real' AND instr(d.a,'|'||d.raw||'|')>0 THEN CASE WHEN d.o IN('gte','lte')THEN 2 ELSE 0 END WHEN(d.type='real' OR d.s=0)AND abs(CAST(d.x AS REAL)- d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 WHEN CASE d.o WHEN 'gt' THEN CAST(d.x AS REAL)>d.v WHEN 'gte' THEN CAST(d.x AS REAL)>=d.v WHEN 'lt' THEN CAST(d.x AS REAL)<d.v ELSE CAST(d.x AS REAL)<=d.v END THEN 2 ELSE 0 END WHEN 'numtype' THEN CASE WHEN d.type IN('real','true','false')OR(d.type='integer' AND typeof(d.x)='integer')THEN d.a WHEN d.type IN('text','integer')THEN 1 ELSE 0 END WHEN 'notcontainer' THEN CASE WHEN d.type=d.a THEN 1 ELSE 2 END ELSE 1 END r FROM(SELECT f.k,f.n,f.a,f.v,f.o,f.s,f.p,json_type(store_items.value,f.p)type,json_extract(store_items.value,f.p)x,store_items.value ->f.p raw FROM conds f LIMIT -1)d LIMIT -1)c)END)verdict FROM store_items WHERE(? IS NULL OR ns=?3 OR(ns>=? AND ns<?))AND(expires_at IS NULL OR ? IS NULL OR expires_at>?6)AND(CASE WHEN substr(store_items.value,1,1)<>'{' THEN 1 ELSE NOT EXISTS(SELECT 1 FROM equals e WHERE CASE e.k WHEN 'text' THEN json_extract(store_items.value,e.p)IS NOT e.a ELSE coalesce(instr(e.a,'|'||(store_items.value ->e.p)||'|'),0)=0 AND json_type(store_items.value,e.p)IS NOT 'real' END)END)),counted AS(SELECT row_id,verdict,count(*)FILTER(WHERE verdict=2)OVER page -(verdict=2)sure_before,count(*)FILTER(WHERE verdict=1)OVER page unsure_upto FROM scoped WHERE verdict>0 WINDOW page AS(ORDER BY updated_at DESC,ns,key ROWS UNBOUNDED PRECEDING))SELECT row_id FROM counted WHERE verdict=2 AND unsure_upto=0 AND sure_before>=? AND(?<0 OR sure_before<?8))

-- name: SEARCH_VECTORS
-- params: ?1 exact, ?2 low, ?3 high, ?4 live_at
SELECT v.ns,v.key,v.field,v.vector FROM store_items s JOIN store_vectors v ON v.ns=s.ns AND v.key=s.key WHERE(? IS NULL OR s.ns=?1 OR(s.ns>=? AND s.ns<?))AND(s.expires_at IS NULL OR ? IS NULL OR s.expires_at>?4)

-- name: SEARCH_VECTORS_FILTERED
-- params: ?1 filter, ?2 exact, ?3 low, ?4 high, ?5 live_at
WITH equals AS MATERIALIZED(SELECT value->>'k' k,value->>'p' p,value->>'a' a FROM json_each(?)WHERE value->>'k' IN('text','num')AND value->>'n' IS NULL)SELECT v.ns,v.key,v.field,v.vector FROM store_items s JOIN store_vectors v ON v.ns=s.ns AND v.key=s.key WHERE(? IS NULL OR s.ns=?2 OR(s.ns>=? AND s.ns<?))AND(s.expires_at IS NULL OR ? IS NULL OR s.expires_at>?5)AND(CASE WHEN substr(s.value,1,1)<>'{' THEN 1 ELSE NOT EXISTS(SELECT 1 FROM equals e WHERE CASE e.k WHEN 'text' THEN json_extract(s.value,e.p)IS NOT e.a ELSE coalesce(instr(e.a,'|'||(s.value ->e.p)||'|'),0)=0 AND json_type(s.value,e.p)IS NOT 'real' END)END)AND(CASE WHEN ?1 IS NULL THEN 2 WHEN substr(s.value,1,1)<>'{' THEN 1 ELSE(WITH conds AS MATERIALIZED(SELECT value->>'k' k,value->>'n' n,value->>'a' a,value->>'v' v,value->>'o' o,value->>'s' s,value->>'p' p FROM json_each(?1))SELECT min(CASE WHEN c.n=1 THEN 2 - c.r ELSE c.r END)FROM(SELECT d.n,CASE d.k WHEN 'unknown' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 0 WHEN 'object' THEN CASE WHEN d.type='object' THEN 2 ELSE 0 END WHEN 'array' THEN CASE WHEN d.type='array' AND json_array_length(s.value,d.p)=d.a THEN 2 ELSE 0 END WHEN 'keys' THEN CASE WHEN d.type='object' AND(SELECT count(*)FROM json_each(s.value,d.p))=d.a THEN 2 ELSE 0 END WHEN 'none' THEN CASE WHEN d.type IS NULL OR d.type='null' THEN 2 ELSE 0 END WHEN 'null' THEN CASE WHEN d.type='null' THEN 2 ELSE 0 END WHEN 'text' THEN CASE WHEN d.type='text' AND d.x=d.a THEN 2 ELSE 0 END WHEN 'text?' THEN CASE WHEN d.type='text' THEN 1 ELSE 0 END WHEN 'num' THEN CASE WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN instr(d.a,'|'||d.raw||'|')>0 THEN 2 WHEN d.type='real' AND abs(d.x - d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 ELSE 0 END WHEN 'cmp' THEN CASE WHEN d.type='text' OR(d.type='integer' AND typeof(d.x)<>'integer')THEN 1 WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN d.type='real' AND instr(d.a,'|'||d.raw||'|')>0 THEN CASE WHEN d.o IN('gte','lte')THEN 2 ELSE 0 END WHEN(d.type='real' OR d.s=0)AND abs(CAST(d.x AS REAL)- d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 WHEN CASE d.o WHEN 'gt' THEN CAST(d.x AS REAL)>d.v WHEN 'gte' THEN CAST(d.x AS REAL)>=d.v WHEN 'lt' THEN CAST(d.x AS REAL)<d.v ELSE CAST(d.x AS REAL)<=d.v END THEN 2 ELSE 0 END WHEN 'numtype' THEN CASE WHEN d.type IN('real','true','false')OR(d.type='integer' AND typeof(d.x)='integer')THEN d.a WHEN d.type IN('text','integer')THEN 1 ELSE 0 END WHEN 'notcontainer' THEN CASE WHEN d.type=d.a THEN 1 ELSE 2 END ELSE 1 END r FROM(SELECT f.k,f.n,f.a,f.v,f.o,f.s,f.p,json_type(s.value,f.p)type,json_extract(s.value,f.p)x,s.value ->f.p raw FROM conds f LIMIT -1)d LIMIT -1)c)END)>0

-- name: RANK_ROWS
-- params: ?1 filter, ?2 exact, ?3 low, ?4 high, ?5 live_at, ?6 whole
WITH equals AS MATERIALIZED(SELECT value->>'k' k,value->>'p' p,value->>'a' a FROM json_each(?)WHERE value->>'k' IN('text','num')AND value->>'n' IS NULL)SELECT c.ns,c.key,c.value,c.created_at,c.updated_at,c.ttl_minutes,c.verdict,v.vector FROM(SELECT s.ns,s.key,s.value,s.created_at,s.updated_at,s.ttl_minutes,(CASE WHEN ?1 IS NULL THEN 2 WHEN substr(s.value,1,1)<>'{' THEN 1 ELSE(WITH conds AS MATERIALIZED(SELECT value->>'k' k,value->>'n' n,value->>'a' a,value->>'v' v,value->>'o' o,value->>'s' s,value->>'p' p FROM json_each(?1))SELECT min(CASE WHEN c.n=1 THEN 2 - c.r ELSE c.r END)FROM(SELECT d.n,CASE d.k WHEN 'unknown' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 0 WHEN 'object' THEN CASE WHEN d.type='object' THEN 2 ELSE 0 END WHEN 'array' THEN CASE WHEN d.type='array' AND json_array_length(s.value,d.p)=d.a THEN 2 ELSE 0 END WHEN 'keys' THEN CASE WHEN d.type='object' AND(SELECT count(*)FROM json_each(s.value,d.p))=d.a THEN 2 ELSE 0 END WHEN 'none' THEN CASE WHEN d.type IS NULL OR d.type='null' THEN 2 ELSE 0 END WHEN 'null' THEN CASE WHEN d.type='null' THEN 2 ELSE 0 END WHEN 'text' THEN CASE WHEN d.type='text' AND d.x=d.a THEN 2 ELSE 0 END WHEN 'text?' THEN CASE WHEN d.type='text' THEN 1 ELSE 0 END WHEN 'num' THEN CASE WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN instr(d.a,'|'||d.raw||'|')>0 THEN 2 WHEN d.type='real' AND abs(d.x - d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 ELSE 0 END WHEN 'cmp' THEN CASE WHEN d.type='text' OR(d.type='integer' AND typeof(d.x)<>'integer')THEN 1 WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN d.type='real' AND instr(d.a,'|'||d.raw||'|')>0 THEN CASE WHEN d.o IN('gte','lte')THEN 2 ELSE 0 END WHEN(d.type='real' OR d.s=0)AND abs(CAST(d.x AS REAL)- d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 WHEN CASE d.o WHEN 'gt' THEN CAST(d.x AS REAL)>d.v WHEN 'gte' THEN CAST(d.x AS REAL)>=d.v WHEN 'lt' THEN CAST(d.x AS REAL)<d.v ELSE CAST(d.x AS REAL)<=d.v END THEN 2 ELSE 0 END WHEN 'numtype' THEN CASE WHEN d.type IN('real','true','false')OR(d.type='integer' AND typeof(d.x)='integer')THEN d.a WHEN d.type IN('text','integer')THEN 1 ELSE 0 END WHEN 'notcontainer' THEN CASE WHEN d.type=d.a THEN 1 ELSE 2 END ELSE 1 END r FROM(SELECT f.k,f.n,f.a,f.v,f.o,f.s,f.p,json_type(s.value,f.p)type,json_extract(s.value,f.p)x,s.value ->f.p raw FROM conds f LIMIT -1)d LIMIT -1)c)END)verdict FROM store_items s WHERE(? IS NULL OR s.ns=?2 OR(s.ns>=? AND s.ns<?))AND(s.expires_at IS NULL OR ? IS NULL OR s.expires_at>?5)AND(? IS NULL OR(SELECT count(*)FROM store_items WHERE(?2 IS NULL OR ns=?2 OR(ns>=?3 AND ns<?4))AND(expires_at IS NULL OR ?5 IS NULL OR expires_at>?5)AND(CASE WHEN substr(value,1,1)<>'{' THEN 1 ELSE NOT EXISTS(SELECT 1 FROM equals e WHERE CASE e.k WHEN 'text' THEN json_extract(value,e.p)IS NOT e.a ELSE coalesce(instr(e.a,'|'||(value ->e.p)||'|'),0)=0 AND json_type(value,e.p)IS NOT 'real' END)END))<=?6)AND(CASE WHEN substr(s.value,1,1)<>'{' THEN 1 ELSE NOT EXISTS(SELECT 1 FROM equals e WHERE CASE e.k WHEN 'text' THEN json_extract(s.value,e.p)IS NOT e.a ELSE coalesce(instr(e.a,'|'||(s.value ->e.p)||'|'),0)=0 AND json_type(s.value,e.p)IS NOT 'real' END)END))c LEFT JOIN store_vectors v ON v.ns=c.ns AND v.key=c.key WHERE c.verdict>0 ORDER BY c.updated_at DESC,c.ns,c.key

-- name: RANK_MARK
-- params: ?1 spec
SELECT ? rank_spec

-- name: SEARCH_CODES
-- params: ?1 filter, ?2 exact, ?3 low, ?4 high, ?5 live_at, ?6 whole
WITH equals AS MATERIALIZED(SELECT value->>'k' k,value->>'p' p,value->>'a' a FROM json_each(?)WHERE value->>'k' IN('text','num')AND value->>'n' IS NULL)SELECT c.item,c.verdict,CASE WHEN v.ns IS NULL THEN NULL ELSE coalesce(v.code,'')END code FROM(SELECT s.rowid item,s.ns,s.key,(CASE WHEN ?1 IS NULL THEN 2 WHEN substr(s.value,1,1)<>'{' THEN 1 ELSE(WITH conds AS MATERIALIZED(SELECT value->>'k' k,value->>'n' n,value->>'a' a,value->>'v' v,value->>'o' o,value->>'s' s,value->>'p' p FROM json_each(?1))SELECT min(CASE WHEN c.n=1 THEN 2 - c.r ELSE c.r END)FROM(SELECT d.n,CASE d.k WHEN 'unknown' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 0 WHEN 'object' THEN CASE WHEN d.type='object' THEN 2 ELSE 0 END WHEN 'array' THEN CASE WHEN d.type='array' AND json_array_length(s.value,d.p)=d.a THEN 2 ELSE 0 END WHEN 'keys' THEN CASE WHEN d.type='object' AND(SELECT count(*)FROM json_each(s.value,d.p))=d.a THEN 2 ELSE 0 END WHEN 'none' THEN CASE WHEN d.type IS NULL OR d.type='null' THEN 2 ELSE 0 END WHEN 'null' THEN CASE WHEN d.type='null' THEN 2 ELSE 0 END WHEN 'text' THEN CASE WHEN d.type='text' AND d.x=d.a THEN 2 ELSE 0 END WHEN 'text?' THEN CASE WHEN d.type='text' THEN 1 ELSE 0 END WHEN 'num' THEN CASE WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN instr(d.a,'|'||d.raw||'|')>0 THEN 2 WHEN d.type='real' AND abs(d.x - d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 ELSE 0 END WHEN 'cmp' THEN CASE WHEN d.type='text' OR(d.type='integer' AND typeof(d.x)<>'integer')THEN 1 WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN d.type='real' AND instr(d.a,'|'||d.raw||'|')>0 THEN CASE WHEN d.o IN('gte','lte')THEN 2 ELSE 0 END WHEN(d.type='real' OR d.s=0)AND abs(CAST(d.x AS REAL)- d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 WHEN CASE d.o WHEN 'gt' THEN CAST(d.x AS REAL)>d.v WHEN 'gte' THEN CAST(d.x AS REAL)>=d.v WHEN 'lt' THEN CAST(d.x AS REAL)<d.v ELSE CAST(d.x AS REAL)<=d.v END THEN 2 ELSE 0 END WHEN 'numtype' THEN CASE WHEN d.type IN('real','true','false')OR(d.type='integer' AND typeof(d.x)='integer')THEN d.a WHEN d.type IN('text','integer')THEN 1 ELSE 0 END WHEN 'notcontainer' THEN CASE WHEN d.type=d.a THEN 1 ELSE 2 END ELSE 1 END r FROM(SELECT f.k,f.n,f.a,f.v,f.o,f.s,f.p,json_type(s.value,f.p)type,json_extract(s.value,f.p)x,s.value ->f.p raw FROM conds f LIMIT -1)d LIMIT -1)c)END)verdict FROM store_items s WHERE(? IS NULL OR s.ns=?2 OR(s.ns>=? AND s.ns<?))AND(s.expires_at IS NULL OR ? IS NULL OR s.expires_at>?5)AND(SELECT count(*)FROM store_items WHERE(?2 IS NULL OR ns=?2 OR(ns>=?3 AND ns<?4))AND(expires_at IS NULL OR ?5 IS NULL OR expires_at>?5)AND(CASE WHEN substr(value,1,1)<>'{' THEN 1 ELSE NOT EXISTS(SELECT 1 FROM equals e WHERE CASE e.k WHEN 'text' THEN json_extract(value,e.p)IS NOT e.a ELSE coalesce(instr(e.a,'|'||(value ->e.p)||'|'),0)=0 AND json_type(value,e.p)IS NOT 'real' END)END))>? AND(CASE WHEN substr(s.value,1,1)<>'{' THEN 1 ELSE NOT EXISTS(SELECT 1 FROM equals e WHERE CASE e.k WHEN 'text' THEN json_extract(s.value,e.p)IS NOT e.a ELSE coalesce(instr(e.a,'|'||(s.value ->e.p)||'|'),0)=0 AND json_type(s.value,e.p)IS NOT 'real' END)END))c LEFT JOIN store_vectors v ON v.ns=c.ns AND v.key=c.key WHERE c.verdict>0

-- name: CANDIDATE_ITEMS
-- params: ?1 filter, ?2 items, ?3 exact, ?4 low, ?5 high, ?6 live_at
SELECT s.ns,s.key,s.value,s.created_at,s.updated_at,s.ttl_minutes,(CASE WHEN ? IS NULL THEN 2 WHEN substr(s.value,1,1)<>'{' THEN 1 ELSE(WITH conds AS MATERIALIZED(SELECT value->>'k' k,value->>'n' n,value->>'a' a,value->>'v' v,value->>'o' o,value->>'s' s,value->>'p' p FROM json_each(?1))SELECT min(CASE WHEN c.n=1 THEN 2 - c.r ELSE c.r END)FROM(SELECT d.n,CASE d.k WHEN 'unknown' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 0 WHEN 'object' THEN CASE WHEN d.type='object' THEN 2 ELSE 0 END WHEN 'array' THEN CASE WHEN d.type='array' AND json_array_length(s.value,d.p)=d.a THEN 2 ELSE 0 END WHEN 'keys' THEN CASE WHEN d.type='object' AND(SELECT count(*)FROM json_each(s.value,d.p))=d.a THEN 2 ELSE 0 END WHEN 'none' THEN CASE WHEN d.type IS NULL OR d.type='null' THEN 2 ELSE 0 END WHEN 'null' THEN CASE WHEN d.type='null' THEN 2 ELSE 0 END WHEN 'text' THEN CASE WHEN d.type='text' AND d.x=d.a THEN 2 ELSE 0 END WHEN 'text?' THEN CASE WHEN d.type='text' THEN 1 ELSE 0 END WHEN 'num' THEN CASE WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN instr(d.a,'|'||d.raw||'|')>0 THEN 2 WHEN d.type='real' AND abs(d.x - d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 ELSE 0 END WHEN 'cmp' THEN CASE WHEN d.type='text' OR(d.type='integer' AND typeof(d.x)<>'integer')THEN 1 WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN d.type='real' AND instr(d.a,'|'||d.raw||'|')>0 THEN CASE WHEN d.o IN('gte','lte')THEN 2 ELSE 0 END WHEN(d.type='real' OR d.s=0)AND abs(CAST(d.x AS REAL)- d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 WHEN CASE d.o WHEN 'gt' THEN CAST(d.x AS REAL)>d.v WHEN 'gte' THEN CAST(d.x AS REAL)>=d.v WHEN 'lt' THEN CAST(d.x AS REAL)<d.v ELSE CAST(d.x AS REAL)<=d.v END THEN 2 ELSE 0 END WHEN 'numtype' THEN CASE WHEN d.type IN('real','true','false')OR(d.type='integer' AND typeof(d.x)='integer')THEN d.a WHEN d.type IN('text','integer')THEN 1 ELSE 0 END WHEN 'notcontainer' THEN CASE WHEN d.type=d.a THEN 1 ELSE 2 END ELSE 1 END r FROM(SELECT f.k,f.n,f.a,f.v,f.o,f.s,f.p,json_type(s.value,f.p)type,json_extract(s.value,f.p)x,s.value ->f.p raw FROM conds f LIMIT -1)d LIMIT -1)c)END)verdict FROM json_each(?)j JOIN store_items s ON s.rowid=j.value WHERE(? IS NULL OR s.ns=?3 OR(s.ns>=? AND s.ns<?))AND(s.expires_at IS NULL OR ? IS NULL OR s.expires_at>?6)AND(CASE WHEN ?1 IS NULL THEN 2 WHEN substr(s.value,1,1)<>'{' THEN 1 ELSE(WITH conds AS MATERIALIZED(SELECT value->>'k' k,value->>'n' n,value->>'a' a,value->>'v' v,value->>'o' o,value->>'s' s,value->>'p' p FROM json_each(?1))SELECT min(CASE WHEN c.n=1 THEN 2 - c.r ELSE c.r END)FROM(SELECT d.n,CASE d.k WHEN 'unknown' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 0 WHEN 'object' THEN CASE WHEN d.type='object' THEN 2 ELSE 0 END WHEN 'array' THEN CASE WHEN d.type='array' AND json_array_length(s.value,d.p)=d.a THEN 2 ELSE 0 END WHEN 'keys' THEN CASE WHEN d.type='object' AND(SELECT count(*)FROM json_each(s.value,d.p))=d.a THEN 2 ELSE 0 END WHEN 'none' THEN CASE WHEN d.type IS NULL OR d.type='null' THEN 2 ELSE 0 END WHEN 'null' THEN CASE WHEN d.type='null' THEN 2 ELSE 0 END WHEN 'text' THEN CASE WHEN d.type='text' AND d.x=d.a THEN 2 ELSE 0 END WHEN 'text?' THEN CASE WHEN d.type='text' THEN 1 ELSE 0 END WHEN 'num' THEN CASE WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN instr(d.a,'|'||d.raw||'|')>0 THEN 2 WHEN d.type='real' AND abs(d.x - d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 ELSE 0 END WHEN 'cmp' THEN CASE WHEN d.type='text' OR(d.type='integer' AND typeof(d.x)<>'integer')THEN 1 WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')THEN 0 WHEN d.type='real' AND instr(d.a,'|'||d.raw||'|')>0 THEN CASE WHEN d.o IN('gte','lte')THEN 2 ELSE 0 END WHEN(d.type='real' OR d.s=0)AND abs(CAST(d.x AS REAL)- d.v)<=1e-15 * abs(d.v)+ 1e-300 THEN 1 WHEN CASE d.o WHEN 'gt' THEN CAST(d.x AS REAL)>d.v WHEN 'gte' THEN CAST(d.x AS REAL)>=d.v WHEN 'lt' THEN CAST(d.x AS REAL)<d.v ELSE CAST(d.x AS REAL)<=d.v END THEN 2 ELSE 0 END WHEN 'numtype' THEN CASE WHEN d.type IN('real','true','false')OR(d.type='integer' AND typeof(d.x)='integer')THEN d.a WHEN d.type IN('text','integer')THEN 1 ELSE 0 END WHEN 'notcontainer' THEN CASE WHEN d.type=d.a THEN 1 ELSE 2 END ELSE 1 END r FROM(SELECT f.k,f.n,f.a,f.v,f.o,f.s,f.p,json_type(s.value,f.p)type,json_extract(s.value,f.p)x,s.value ->f.p raw FROM conds f LIMIT -1)d LIMIT -1)c)END)>0

-- name: CANDIDATE_VECTORS
-- params: ?1 items
SELECT v.ns,v.key,v.field,v.vector FROM json_each(?)j JOIN store_items s ON s.rowid=j.value JOIN store_vectors v ON v.ns=s.ns AND v.key=s.key

-- name: LIST_NAMESPACES
-- params: ?1 exact, ?2 low, ?3 high, ?4 live_at
SELECT DISTINCT ns FROM store_items WHERE(? IS NULL OR ns=?1 OR(ns>=? AND ns<?))AND(expires_at IS NULL OR ? IS NULL OR expires_at>?4)ORDER BY ns

-- name: DELETE_SCOPE[0]
-- params: ?1 exact, ?2 low, ?3 high
DELETE FROM store_vectors WHERE(? IS NULL OR ns=?1 OR(ns>=? AND ns<?))

-- name: DELETE_SCOPE[1]
-- params: ?1 exact, ?2 low, ?3 high
DELETE FROM store_items WHERE(? IS NULL OR ns=?1 OR(ns>=? AND ns<?))

-- name: SWEEP_STORE[0]
-- params: ?1 now
DELETE FROM store_vectors WHERE(ns,key)IN(SELECT ns,key FROM store_items WHERE expires_at IS NOT NULL AND expires_at<=?)

-- name: SWEEP_STORE[1]
-- params: ?1 now
DELETE FROM store_items WHERE expires_at IS NOT NULL AND expires_at<=?

-- name: SWEEP_CACHE
-- params: ?1 now
DELETE FROM cache_entries WHERE expires_at IS NOT NULL AND expires_at<=?

-- name: COUNT_EXPIRED
SELECT(SELECT COUNT(*)FROM store_items WHERE expires_at IS NOT NULL AND expires_at<=(julianday('now')- 2440587.5)* 86400.0 - 60)items,(SELECT COUNT(*)FROM cache_entries WHERE expires_at IS NOT NULL AND expires_at<=(julianday('now')- 2440587.5)* 86400.0 - 60)cache

-- name: SWEEP_EXPIRED[0]
DELETE FROM store_vectors WHERE(ns,key)IN(SELECT ns,key FROM store_items WHERE expires_at IS NOT NULL AND expires_at<=(julianday('now')- 2440587.5)* 86400.0 - 60)

-- name: SWEEP_EXPIRED[1]
DELETE FROM store_items WHERE expires_at IS NOT NULL AND expires_at<=(julianday('now')- 2440587.5)* 86400.0 - 60

-- name: SWEEP_EXPIRED[2]
DELETE FROM cache_entries WHERE expires_at IS NOT NULL AND expires_at<=(julianday('now')- 2440587.5)* 86400.0 - 60

-- name: CACHE_GET
-- params: ?1 keys, ?2 now
SELECT c.ns,c.key,c.value FROM json_each(?)j JOIN cache_entries c ON c.ns=j.value->>0 AND c.key=j.value->>1 WHERE c.expires_at IS NULL OR c.expires_at>?

-- name: CACHE_SET
-- params: ?1 rows
INSERT OR REPLACE INTO cache_entries(ns,key,value,expires_at)SELECT value->>0,value->>1,value->>2,value->>3 FROM json_each(?)

-- name: CACHE_DELETE
-- params: ?1 keys
DELETE FROM cache_entries WHERE(ns,key)IN(SELECT value->>0,value->>1 FROM json_each(?))

-- name: CACHE_CLEAR
-- params: ?1 namespaces
DELETE FROM cache_entries WHERE ? IS NULL OR ns IN(SELECT value FROM json_each(?1))

-- name: VOID_MEMORY_MOVES
-- params: ?1 low, ?2 high
DELETE FROM d1saver_moves WHERE thread_id>=? AND thread_id<?

-- name: ITEM_KEYS_PAGE
-- params: ?1 after_ns, ?2 after_key, ?3 limit
SELECT s.ns,s.key,length(s.value)+ COALESCE((SELECT SUM(length(v.vector))FROM store_vectors v WHERE v.ns=s.ns AND v.key=s.key),0)bytes FROM store_items s WHERE(s.ns,s.key)>(?,?)ORDER BY s.ns,s.key LIMIT CAST(? AS INTEGER)

-- name: ENTRY_KEYS_PAGE
-- params: ?1 after_ns, ?2 after_key, ?3 limit
SELECT ns,key,length(value)bytes FROM cache_entries WHERE(ns,key)>(?,?)ORDER BY ns,key LIMIT CAST(? AS INTEGER)

-- name: READ_ITEMS_TO_MOVE
-- params: ?1 keys
SELECT ns,key,value,created_at,updated_at,expires_at,ttl_minutes,length(value)||':'||substr(value,1,40)||substr(value,-40)||':'||created_at||':'||updated_at||':'||COALESCE(expires_at,'-')||':'||COALESCE(ttl_minutes,'-')fp FROM store_items WHERE(ns,key)IN(SELECT value->>0,value->>1 FROM json_each(?))

-- name: READ_VECTORS_TO_MOVE
-- params: ?1 keys
SELECT ns,key,field,vector FROM store_vectors WHERE(ns,key)IN(SELECT value->>0,value->>1 FROM json_each(?))

-- name: READ_ENTRIES_TO_MOVE
-- params: ?1 keys
SELECT ns,key,value,expires_at,length(value)||':'||substr(value,1,40)||substr(value,-40)||':'||COALESCE(expires_at,'-')fp FROM cache_entries WHERE(ns,key)IN(SELECT value->>0,value->>1 FROM json_each(?))

-- name: MOVE_IN_OLDER_VECTORS
-- params: ?1 keys
DELETE FROM store_vectors WHERE(ns,key)IN(SELECT s.ns,s.key FROM store_items s JOIN json_each(?)j ON s.ns=j.value->>0 AND s.key=j.value->>1 WHERE s.updated_at<j.value->>2)

-- name: MOVE_IN_OLDER_ITEMS
-- params: ?1 keys
DELETE FROM store_items WHERE(ns,key)IN(SELECT s.ns,s.key FROM store_items s JOIN json_each(?)j ON s.ns=j.value->>0 AND s.key=j.value->>1 WHERE s.updated_at<j.value->>2)

-- name: MOVE_IN_VECTORS
-- params: ?1 rows
INSERT OR REPLACE INTO store_vectors(ns,key,field,vector)SELECT j.value->>0,j.value->>1,j.value->>2,j.value->>3 FROM json_each(?)j WHERE NOT EXISTS(SELECT 1 FROM store_items s WHERE s.ns=j.value->>0 AND s.key=j.value->>1)

-- name: MOVE_IN_ITEMS
-- params: ?1 rows
INSERT INTO store_items(ns,key,value,created_at,updated_at,expires_at,ttl_minutes)SELECT value->>0,value->>1,value->>2,value->>3,value->>4,value->>5,value->>6 FROM json_each(?)WHERE 1 ON CONFLICT(ns,key)DO NOTHING

-- name: MOVE_IN_ENTRIES
-- params: ?1 rows
INSERT INTO cache_entries(ns,key,value,expires_at)SELECT value->>0,value->>1,value->>2,value->>3 FROM json_each(?)WHERE 1 ON CONFLICT(ns,key)DO NOTHING

-- name: MOVE_OUT_ITEMS
-- params: ?1 rows
DELETE FROM store_items WHERE(ns,key)IN(SELECT value->>0,value->>1 FROM json_each(?))AND length(value)||':'||substr(value,1,40)||substr(value,-40)||':'||created_at||':'||updated_at||':'||COALESCE(expires_at,'-')||':'||COALESCE(ttl_minutes,'-')=(SELECT j.value->>2 FROM json_each(?1)j WHERE j.value->>0=store_items.ns AND j.value->>1=store_items.key)

-- name: MOVE_OUT_VECTORS
-- params: ?1 rows
DELETE FROM store_vectors WHERE(ns,key)IN(SELECT value->>0,value->>1 FROM json_each(?))AND NOT EXISTS(SELECT 1 FROM store_items s WHERE s.ns=store_vectors.ns AND s.key=store_vectors.key)

-- name: MOVE_OUT_ENTRIES
-- params: ?1 rows
DELETE FROM cache_entries WHERE(ns,key)IN(SELECT value->>0,value->>1 FROM json_each(?))AND length(value)||':'||substr(value,1,40)||substr(value,-40)||':'||COALESCE(expires_at,'-')=(SELECT j.value->>2 FROM json_each(?1)j WHERE j.value->>0=cache_entries.ns AND j.value->>1=cache_entries.key)

-- name: MEMORY_KEY_CENSUS
SELECT 'store_items' tbl,CASE WHEN substr(value,1,2)='e:' THEN substr(value,1,7)END head,COUNT(*)row_count FROM store_items GROUP BY 2 UNION ALL SELECT 'cache_entries',CASE WHEN substr(value,instr(value,char(10))+ 1,2)='e:' THEN substr(value,instr(value,char(10))+ 1,7)END,COUNT(*)FROM cache_entries GROUP BY 2

-- name: RAW_ITEMS
-- params: ?1 after_ns, ?2 after_key, ?3 heads, ?4 limit
SELECT ns,key,value FROM store_items WHERE(ns,key)>(?,?)AND(? IS NULL OR substr(value,1,7)NOT IN(SELECT value FROM json_each(?3)))ORDER BY ns,key LIMIT CAST(? AS INTEGER)

-- name: RAW_ENTRIES
-- params: ?1 after_ns, ?2 after_key, ?3 heads, ?4 limit
SELECT ns,key,value FROM cache_entries WHERE(ns,key)>(?,?)AND(? IS NULL OR substr(value,instr(value,char(10))+ 1,7)NOT IN(SELECT value FROM json_each(?3)))ORDER BY ns,key LIMIT CAST(? AS INTEGER)

-- name: REKEY_ITEM
-- params: ?1 value, ?2 ns, ?3 key, ?4 value_fp
UPDATE store_items SET value=? WHERE ns=? AND key=? AND length(value)||':'||substr(value,1,40)||substr(value,-40)IS ?

-- name: REKEY_ENTRY
-- params: ?1 value, ?2 ns, ?3 key, ?4 value_fp
UPDATE cache_entries SET value=? WHERE ns=? AND key=? AND length(value)||':'||substr(value,1,40)||substr(value,-40)IS ?

-- name: THREADS_LIST
-- params: ?1 text, ?2 sort, ?3 after, ?4 key, ?5 inclusive, ?6 limit
WITH threads AS(SELECT c.thread_id,COUNT(*)checkpoints,COUNT(DISTINCT c.checkpoint_ns)namespaces,MAX(c.ts)updated,SUM(LENGTH(c.checkpoint)+ LENGTH(c.metadata))own,MAX(CASE WHEN c.checkpoint_ns='' THEN c.checkpoint_id END)head FROM checkpoints c WHERE NOT(c.thread_id>=char(31)||'d1saver-' AND c.thread_id<char(31)||'d1saver.')AND instr(lower(c.thread_id),lower(?))>0 GROUP BY c.thread_id),keyed AS(SELECT t.*,CASE ? WHEN 'updated' THEN COALESCE(t.updated,'')WHEN 'checkpoints' THEN printf('%020d',t.checkpoints)WHEN 'bytes' THEN printf('%020d',(t.own +(SELECT COALESCE(SUM(LENGTH(w.value)),0)FROM writes w WHERE w.thread_id=t.thread_id)+(SELECT COALESCE(SUM(LENGTH(p.data)),0)FROM chunks p WHERE p.thread_id=t.thread_id)+(SELECT COALESCE(SUM(LENGTH(k.data)),0)FROM d1saver_chunks k WHERE k.thread_id=t.thread_id)+(SELECT COALESCE(SUM(LENGTH(f.value)+ COALESCE(LENGTH(f.metadata),0)),0)FROM delta_frozen f WHERE f.thread_id=t.thread_id)))ELSE '' END sort_key FROM threads t)SELECT x.thread_id,x.checkpoints,x.namespaces,x.updated,(x.own +(SELECT COALESCE(SUM(LENGTH(w.value)),0)FROM writes w WHERE w.thread_id=x.thread_id)+(SELECT COALESCE(SUM(LENGTH(p.data)),0)FROM chunks p WHERE p.thread_id=x.thread_id)+(SELECT COALESCE(SUM(LENGTH(k.data)),0)FROM d1saver_chunks k WHERE k.thread_id=x.thread_id)+(SELECT COALESCE(SUM(LENGTH(f.value)+ COALESCE(LENGTH(f.metadata),0)),0)FROM delta_frozen f WHERE f.thread_id=x.thread_id))bytes,EXISTS(SELECT 1 FROM writes w WHERE w.thread_id=x.thread_id AND w.checkpoint_ns='' AND w.checkpoint_id=x.head AND w.channel='__interrupt__')waiting,x.sort_key,n.total FROM(SELECT COUNT(*)total FROM threads)n LEFT JOIN keyed x ON ? IS NULL OR x.sort_key<? OR(x.sort_key=?4 AND(x.thread_id>?3 OR(x.thread_id=?3 AND ?=1)))ORDER BY x.sort_key DESC,x.thread_id LIMIT ?

-- name: GROWTH
-- params: ?1 thread_id, ?2 limit
WITH RECURSIVE reached(checkpoint_ns,checkpoint_id,id)AS(SELECT c.checkpoint_ns,c.checkpoint_id,ltrim(j.value,'^')FROM checkpoints c,json_each(CASE WHEN substr(c.checkpoint,1,2)='m:' THEN '["'||replace(substr(c.checkpoint,3),',','","')||'"]' ELSE '[]' END)j WHERE c.thread_id=? AND instr(j.value,':')=0 UNION SELECT w.checkpoint_ns,w.checkpoint_id,ltrim(j.value,'^')FROM writes w,json_each(CASE WHEN substr(w.value,1,2)='m:' THEN '["'||replace(substr(w.value,3),',','","')||'"]' ELSE '[]' END)j WHERE w.thread_id=?1 AND instr(j.value,':')=0 UNION SELECT w.checkpoint_ns,w.checkpoint_id,ltrim(j.value,'^')FROM writes w,json_each(CASE WHEN substr(w.value,1,2)='p:' THEN substr(w.value,3)ELSE '[]' END)p,json_each(CASE WHEN substr(p.value->>3,1,2)='m:' THEN '["'||replace(substr(p.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE w.thread_id=?1 AND instr(j.value,':')=0 UNION SELECT f.checkpoint_ns,f.checkpoint_id,ltrim(j.value,'^')FROM delta_frozen f,json_each(CASE WHEN substr(f.value,1,2)='m:' THEN '["'||replace(substr(f.value,3),',','","')||'"]' ELSE '[]' END)j WHERE f.thread_id=?1 AND instr(j.value,':')=0 UNION SELECT r.checkpoint_ns,r.checkpoint_id,ltrim(j.value,'^')FROM reached r CROSS JOIN d1saver_chunks n ON n.thread_id=?1 AND n.id=r.id AND n.level>0,json_each('["'||replace(n.data,',','","')||'"]')j),first AS(SELECT id,checkpoint_ns,MIN(checkpoint_id)checkpoint_id FROM reached GROUP BY id),added AS(SELECT f.checkpoint_ns,f.checkpoint_id,SUM(LENGTH(k.data))bytes FROM first f JOIN d1saver_chunks k ON k.thread_id=?1 AND k.id=f.id GROUP BY f.checkpoint_ns,f.checkpoint_id)SELECT c.checkpoint_ns,c.checkpoint_id,c.parent_checkpoint_id,c.ts,LENGTH(c.checkpoint)+ LENGTH(c.metadata)checkpoint_bytes,(SELECT COALESCE(SUM(LENGTH(w.value)),0)FROM writes w WHERE w.thread_id=c.thread_id AND w.checkpoint_ns=c.checkpoint_ns AND w.checkpoint_id=c.checkpoint_id)writes_bytes,(SELECT COALESCE(SUM(LENGTH(p.data)),0)FROM chunks p WHERE p.thread_id=c.thread_id AND p.checkpoint_ns=c.checkpoint_ns AND p.checkpoint_id=c.checkpoint_id)parts_bytes,COALESCE(a.bytes,0)chunk_bytes,(SELECT COALESCE(SUM(LENGTH(f.value)+ COALESCE(LENGTH(f.metadata),0)),0)FROM delta_frozen f WHERE f.thread_id=c.thread_id AND f.checkpoint_ns=c.checkpoint_ns AND f.checkpoint_id=c.checkpoint_id)frozen_bytes FROM checkpoints c LEFT JOIN added a ON a.checkpoint_ns=c.checkpoint_ns AND a.checkpoint_id=c.checkpoint_id WHERE c.thread_id=?1 ORDER BY c.checkpoint_id,c.checkpoint_ns LIMIT ?

-- name: CHECKPOINT_HEAD
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 checkpoint_id
SELECT substr(checkpoint,1,40)head,metadata FROM checkpoints WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?

-- name: CHECKPOINT_IDS
-- params: ?1 thread_id, ?2 checkpoint_ns, ?3 prefix, ?4 upper, ?5 limit
SELECT checkpoint_id FROM checkpoints WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id>=? AND checkpoint_id<? AND substr(checkpoint_id,1,length(?3))=?3 ORDER BY checkpoint_id LIMIT ?

-- name: STORE_NAMESPACES
-- params: ?1 exact, ?2 low, ?3 high, ?4 now, ?5 limit, ?6 offset
SELECT ns,COUNT(*)items,SUM(LENGTH(value))bytes,MAX(updated_at)updated_at,MIN(expires_at)next_expiry FROM store_items WHERE(? IS NULL OR ns=?1 OR(ns>=? AND ns<?))AND(expires_at IS NULL OR expires_at>?)GROUP BY ns ORDER BY ns LIMIT ? OFFSET ?

-- name: STORE_ITEMS
-- params: ?1 ns, ?2 now, ?3 limit, ?4 offset
SELECT ns,key,value,created_at,updated_at,expires_at,ttl_minutes FROM store_items WHERE ns=? AND(expires_at IS NULL OR expires_at>?)ORDER BY updated_at DESC,key LIMIT ? OFFSET ?

-- name: CACHE_SUMMARY
-- params: ?1 now, ?2 limit
SELECT ns,COUNT(*)entries,SUM(LENGTH(value))bytes,SUM(CASE WHEN expires_at IS NOT NULL AND expires_at<=? THEN 1 ELSE 0 END)expired,MIN(CASE WHEN expires_at>?1 THEN expires_at END)next_expiry FROM cache_entries GROUP BY ns ORDER BY ns LIMIT ?

-- name: MIGRATIONS[0][0]
CREATE TABLE IF NOT EXISTS checkpoints(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL DEFAULT '',checkpoint_id TEXT NOT NULL,parent_checkpoint_id TEXT,type TEXT,checkpoint TEXT NOT NULL,metadata TEXT NOT NULL DEFAULT '{}',channels TEXT NOT NULL DEFAULT '[]',run_id TEXT,ts TEXT,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id))

-- name: MIGRATIONS[0][1]
CREATE INDEX IF NOT EXISTS checkpoints_run_id ON checkpoints(run_id)

-- name: MIGRATIONS[0][2]
CREATE TABLE IF NOT EXISTS writes(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL DEFAULT '',checkpoint_id TEXT NOT NULL,task_id TEXT NOT NULL,task_path TEXT NOT NULL DEFAULT '',idx INTEGER NOT NULL,channel TEXT NOT NULL,type TEXT,value TEXT,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id,task_id,idx))

-- name: MIGRATIONS[0][3]
CREATE TABLE IF NOT EXISTS chunks(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL DEFAULT '',checkpoint_id TEXT NOT NULL,owner TEXT NOT NULL,seq INTEGER NOT NULL,data TEXT NOT NULL,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id,owner,seq))

-- name: MIGRATIONS[0][4]
CREATE TABLE IF NOT EXISTS tags(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL DEFAULT '',checkpoint_id TEXT NOT NULL,name TEXT NOT NULL,created_at TEXT NOT NULL,PRIMARY KEY(thread_id,checkpoint_ns,name))

-- name: MIGRATIONS[0][5]
CREATE INDEX IF NOT EXISTS tags_checkpoint ON tags(thread_id,checkpoint_ns,checkpoint_id)

-- name: MIGRATIONS[0][6]
CREATE TABLE IF NOT EXISTS leases(name TEXT PRIMARY KEY,holder TEXT NOT NULL,expires_at INTEGER NOT NULL)

-- name: MIGRATIONS[0][7]
CREATE TABLE IF NOT EXISTS d1saver_scope(thread_id TEXT PRIMARY KEY)

-- name: MIGRATIONS[0][8]
CREATE TABLE IF NOT EXISTS d1saver_keep(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL,checkpoint_id TEXT NOT NULL,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id))

-- name: MIGRATIONS[0][9]
CREATE TABLE IF NOT EXISTS d1saver_relink(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL,checkpoint_id TEXT NOT NULL,new_parent TEXT,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id))

-- name: MIGRATIONS[0][10]
CREATE TABLE IF NOT EXISTS d1saver_guard(head_moved INTEGER CONSTRAINT head_moved CHECK(head_moved IS NULL),lease_lost INTEGER CONSTRAINT lease_lost CHECK(lease_lost IS NULL))

-- name: MIGRATIONS[0][11]
CREATE TABLE IF NOT EXISTS d1saver_schema(version INTEGER PRIMARY KEY,applied_at TEXT NOT NULL)

-- name: MIGRATIONS[0][12]
INSERT OR IGNORE INTO d1saver_schema(version,applied_at)VALUES(1,strftime('%Y-%m-%dT%H:%M:%SZ','now'))

-- name: MIGRATIONS[1][0]
CREATE TABLE IF NOT EXISTS d1saver_guards(head_moved INTEGER CONSTRAINT head_moved CHECK(head_moved IS NULL),lease_lost INTEGER CONSTRAINT lease_lost CHECK(lease_lost IS NULL),schema_outdated INTEGER CONSTRAINT schema_outdated CHECK(schema_outdated IS NULL),schema_too_new INTEGER CONSTRAINT schema_too_new CHECK(schema_too_new IS NULL))

-- name: MIGRATIONS[1][1]
ALTER TABLE d1saver_schema ADD COLUMN min_reader INTEGER NOT NULL DEFAULT 1

-- name: MIGRATIONS[2][0]
CREATE INDEX IF NOT EXISTS checkpoints_by_id ON checkpoints(checkpoint_id,thread_id,checkpoint_ns)

-- name: MIGRATIONS[2][1]
CREATE TRIGGER IF NOT EXISTS checkpoints_own_chunks AFTER INSERT ON checkpoints BEGIN DELETE FROM chunks WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND owner IN('',':metadata'); END

-- name: MIGRATIONS[2][2]
CREATE TRIGGER IF NOT EXISTS writes_own_chunks AFTER INSERT ON writes BEGIN DELETE FROM chunks WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND owner=NEW.task_id||'/'||NEW.idx; END

-- name: MIGRATIONS[3][0]
CREATE TABLE IF NOT EXISTS d1saver_ops(op_id TEXT PRIMARY KEY,result TEXT NOT NULL,created_at INTEGER NOT NULL)

-- name: MIGRATIONS[3][1]
CREATE INDEX IF NOT EXISTS d1saver_ops_created ON d1saver_ops(created_at)

-- name: MIGRATIONS[4][0]
CREATE TABLE IF NOT EXISTS delta_unwritten(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL,checkpoint_id TEXT NOT NULL,channels TEXT NOT NULL,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id))

-- name: MIGRATIONS[4][1]
CREATE TRIGGER IF NOT EXISTS delta_unwritten_on_put AFTER INSERT ON checkpoints BEGIN DELETE FROM delta_unwritten WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id; END

-- name: MIGRATIONS[4][2]
CREATE TRIGGER IF NOT EXISTS delta_unwritten_on_delete AFTER DELETE ON checkpoints BEGIN DELETE FROM delta_unwritten WHERE thread_id=OLD.thread_id AND checkpoint_ns=OLD.checkpoint_ns AND checkpoint_id=OLD.checkpoint_id; END

-- name: MIGRATIONS[5][0]
CREATE TABLE IF NOT EXISTS delta_frozen(thread_id TEXT NOT NULL,checkpoint_ns TEXT NOT NULL,checkpoint_id TEXT NOT NULL,channel TEXT NOT NULL,kind TEXT NOT NULL,depth INTEGER NOT NULL,task_id TEXT NOT NULL,idx INTEGER NOT NULL,src_checkpoint_id TEXT NOT NULL,task_path TEXT NOT NULL DEFAULT '',type TEXT,value TEXT,metadata TEXT,channels TEXT,PRIMARY KEY(thread_id,checkpoint_ns,checkpoint_id,channel,kind,depth,task_id,idx))

-- name: MIGRATIONS[5][1]
CREATE TRIGGER IF NOT EXISTS delta_frozen_on_delete AFTER DELETE ON checkpoints BEGIN DELETE FROM delta_frozen WHERE thread_id=OLD.thread_id AND checkpoint_ns=OLD.checkpoint_ns AND checkpoint_id=OLD.checkpoint_id; END

-- name: MIGRATIONS[6][0]
CREATE TABLE IF NOT EXISTS d1saver_chunks(thread_id TEXT NOT NULL,id TEXT NOT NULL,level INTEGER NOT NULL,data TEXT NOT NULL,PRIMARY KEY(thread_id,id))WITHOUT ROWID

-- name: MIGRATIONS[6][1]
CREATE TRIGGER IF NOT EXISTS d1saver_chunks_closed AFTER INSERT ON d1saver_chunks WHEN NEW.level>0 BEGIN SELECT RAISE(ABORT,'d1saver chunk_missing')WHERE EXISTS(SELECT 1 FROM json_each('["'||replace(NEW.data,',','","')||'"]')j WHERE NOT EXISTS(SELECT 1 FROM d1saver_chunks k WHERE k.thread_id=NEW.thread_id AND k.id=ltrim(j.value,'^'))); END

-- name: MIGRATIONS[6][2]
CREATE TRIGGER IF NOT EXISTS checkpoints_chunks_closed AFTER INSERT ON checkpoints WHEN substr(NEW.checkpoint,1,2)='m:' BEGIN SELECT RAISE(ABORT,'d1saver chunk_missing')WHERE EXISTS(SELECT 1 FROM json_each('["'||replace(substr(NEW.checkpoint,3),',','","')||'"]')j WHERE instr(j.value,':')=0 AND NOT EXISTS(SELECT 1 FROM d1saver_chunks k WHERE k.thread_id=NEW.thread_id AND k.id=ltrim(j.value,'^'))); END

-- name: MIGRATIONS[6][3]
CREATE TRIGGER IF NOT EXISTS writes_chunks_closed AFTER INSERT ON writes WHEN substr(NEW.value,1,2)='m:' BEGIN SELECT RAISE(ABORT,'d1saver chunk_missing')WHERE EXISTS(SELECT 1 FROM json_each('["'||replace(substr(NEW.value,3),',','","')||'"]')j WHERE instr(j.value,':')=0 AND NOT EXISTS(SELECT 1 FROM d1saver_chunks k WHERE k.thread_id=NEW.thread_id AND k.id=ltrim(j.value,'^'))); END

-- name: MIGRATIONS[6][4]
CREATE VIEW IF NOT EXISTS d1saver_put(thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts,chunks)AS SELECT NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL WHERE 0

-- name: MIGRATIONS[6][5]
CREATE TRIGGER IF NOT EXISTS d1saver_put_row INSTEAD OF INSERT ON d1saver_put BEGIN INSERT OR IGNORE INTO d1saver_chunks(thread_id,id,level,data)SELECT NEW.thread_id,value->>0,value->>1,value->>2 FROM json_each(NEW.chunks); INSERT OR REPLACE INTO checkpoints(thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts)VALUES(NEW.thread_id,NEW.checkpoint_ns,NEW.checkpoint_id,NEW.parent_checkpoint_id,COALESCE(NEW.type,'msgpack'),NEW.checkpoint,NEW.metadata,NEW.channels,NEW.run_id,NEW.ts); END

-- name: MIGRATIONS[6][6]
CREATE VIEW IF NOT EXISTS d1saver_put_writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,special,regular,chunks)AS SELECT NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL WHERE 0

-- name: MIGRATIONS[6][7]
CREATE TRIGGER IF NOT EXISTS d1saver_put_writes_rows INSTEAD OF INSERT ON d1saver_put_writes BEGIN INSERT OR IGNORE INTO d1saver_chunks(thread_id,id,level,data)SELECT NEW.thread_id,value->>0,value->>1,value->>2 FROM json_each(NEW.chunks); INSERT OR REPLACE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT NEW.thread_id,NEW.checkpoint_ns,NEW.checkpoint_id,NEW.task_id,NEW.task_path,value->>0,value->>1,COALESCE(value->>2,'msgpack'),value->>3 FROM json_each(NEW.special); INSERT OR IGNORE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT NEW.thread_id,NEW.checkpoint_ns,NEW.checkpoint_id,NEW.task_id,NEW.task_path,json_extract(NEW.regular,'$[0][0]'),'','pack','p:'||NEW.regular WHERE json_array_length(NEW.regular)>1 AND NOT EXISTS(SELECT 1 FROM writes WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND task_id=NEW.task_id AND idx>=0); INSERT OR IGNORE INTO writes(thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)SELECT NEW.thread_id,NEW.checkpoint_ns,NEW.checkpoint_id,NEW.task_id,NEW.task_path,j.value->>0,j.value->>1,COALESCE(j.value->>2,'msgpack'),j.value->>3 FROM json_each(NEW.regular)j WHERE NOT EXISTS(SELECT 1 FROM writes p,json_each(CASE WHEN substr(p.value,1,2)='p:' THEN substr(p.value,3)ELSE '[]' END)q WHERE p.thread_id=NEW.thread_id AND p.checkpoint_ns=NEW.checkpoint_ns AND p.checkpoint_id=NEW.checkpoint_id AND p.task_id=NEW.task_id AND q.value->>0=j.value->>0); END

-- name: MIGRATIONS[6][8]
CREATE TRIGGER IF NOT EXISTS writes_pack_chunks_closed AFTER INSERT ON writes WHEN substr(NEW.value,1,2)='p:' BEGIN SELECT RAISE(ABORT,'d1saver chunk_missing')WHERE EXISTS(SELECT 1 FROM json_each(substr(NEW.value,3))w,json_each(CASE WHEN substr(w.value->>3,1,2)='m:' THEN '["'||replace(substr(w.value->>3,3),',','","')||'"]' ELSE '[]' END)j WHERE instr(j.value,':')=0 AND NOT EXISTS(SELECT 1 FROM d1saver_chunks k WHERE k.thread_id=NEW.thread_id AND k.id=ltrim(j.value,'^'))); END

-- name: MIGRATIONS[8][0]
ALTER TABLE delta_frozen ADD COLUMN parent TEXT

-- name: MIGRATIONS[8][1]
UPDATE delta_frozen SET parent=(SELECT c.parent_checkpoint_id FROM checkpoints c WHERE c.thread_id=delta_frozen.thread_id AND c.checkpoint_ns=delta_frozen.checkpoint_ns AND c.checkpoint_id=delta_frozen.checkpoint_id)

-- name: MIGRATIONS[8][2]
CREATE TRIGGER IF NOT EXISTS delta_frozen_bound AFTER INSERT ON checkpoints WHEN EXISTS(SELECT 1 FROM delta_frozen f WHERE f.thread_id=NEW.thread_id AND f.checkpoint_ns=NEW.checkpoint_ns AND f.checkpoint_id=NEW.checkpoint_id)BEGIN UPDATE checkpoints SET parent_checkpoint_id=(SELECT f.parent FROM delta_frozen f WHERE f.thread_id=NEW.thread_id AND f.checkpoint_ns=NEW.checkpoint_ns AND f.checkpoint_id=NEW.checkpoint_id LIMIT 1)WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND NEW.parent_checkpoint_id IS NOT NULL AND NOT EXISTS(SELECT 1 FROM checkpoints p WHERE p.thread_id=NEW.thread_id AND p.checkpoint_ns=NEW.checkpoint_ns AND p.checkpoint_id=NEW.parent_checkpoint_id); DELETE FROM delta_frozen WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND parent IS NOT(SELECT c.parent_checkpoint_id FROM checkpoints c WHERE c.thread_id=NEW.thread_id AND c.checkpoint_ns=NEW.checkpoint_ns AND c.checkpoint_id=NEW.checkpoint_id); DELETE FROM chunks WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND substr(owner,1,2)='f/' AND NOT EXISTS(SELECT 1 FROM delta_frozen f WHERE f.thread_id=NEW.thread_id AND f.checkpoint_ns=NEW.checkpoint_ns AND f.checkpoint_id=NEW.checkpoint_id); END

-- name: MIGRATIONS[9][0]
CREATE TABLE IF NOT EXISTS d1saver_compaction_runs(run_id TEXT NOT NULL,database_id TEXT NOT NULL,trigger TEXT NOT NULL,started_at TEXT NOT NULL,ended_at TEXT,status TEXT NOT NULL,reason TEXT,keep INTEGER,max_age_days INTEGER,threads_scanned INTEGER NOT NULL DEFAULT 0,threads_compacted INTEGER NOT NULL DEFAULT 0,threads_expired INTEGER NOT NULL DEFAULT 0,checkpoints_deleted INTEGER NOT NULL DEFAULT 0,writes_deleted INTEGER NOT NULL DEFAULT 0,bytes_freed INTEGER NOT NULL DEFAULT 0,batches INTEGER NOT NULL DEFAULT 0,PRIMARY KEY(run_id,database_id))

-- name: MIGRATIONS[9][1]
CREATE INDEX IF NOT EXISTS d1saver_compaction_runs_started ON d1saver_compaction_runs(started_at)

-- name: MIGRATIONS[9][2]
CREATE TABLE IF NOT EXISTS d1saver_compaction_cursor(name TEXT PRIMARY KEY,after TEXT NOT NULL,run_id TEXT NOT NULL,updated_at TEXT NOT NULL)

-- name: MIGRATIONS[10][0]
CREATE TABLE IF NOT EXISTS store_items(ns TEXT NOT NULL,key TEXT NOT NULL,value TEXT NOT NULL,created_at REAL NOT NULL,updated_at REAL NOT NULL,expires_at REAL,ttl_minutes REAL,PRIMARY KEY(ns,key))

-- name: MIGRATIONS[10][1]
CREATE INDEX IF NOT EXISTS store_items_expires ON store_items(expires_at)WHERE expires_at IS NOT NULL

-- name: MIGRATIONS[10][2]
CREATE TABLE IF NOT EXISTS store_vectors(ns TEXT NOT NULL,key TEXT NOT NULL,field TEXT NOT NULL,vector TEXT NOT NULL,PRIMARY KEY(ns,key,field))

-- name: MIGRATIONS[10][3]
CREATE TABLE IF NOT EXISTS cache_entries(ns TEXT NOT NULL,key TEXT NOT NULL,value TEXT NOT NULL,expires_at REAL,PRIMARY KEY(ns,key))

-- name: MIGRATIONS[10][4]
CREATE INDEX IF NOT EXISTS cache_entries_expires ON cache_entries(expires_at)WHERE expires_at IS NOT NULL

-- name: MIGRATIONS[11][0]
CREATE TABLE IF NOT EXISTS d1saver_moves(thread_id TEXT PRIMARY KEY,move_id TEXT NOT NULL,created_at INTEGER NOT NULL)

-- name: MIGRATIONS[11][1]
CREATE TABLE IF NOT EXISTS d1saver_staged(staging_id TEXT PRIMARY KEY,thread_id TEXT NOT NULL,source_id TEXT NOT NULL,created_at INTEGER NOT NULL,expires_at INTEGER NOT NULL)

-- name: MIGRATIONS[11][2]
CREATE INDEX IF NOT EXISTS d1saver_staged_thread ON d1saver_staged(thread_id)

-- name: MIGRATIONS[11][3]
CREATE INDEX IF NOT EXISTS d1saver_staged_source ON d1saver_staged(source_id)

-- name: MIGRATIONS[11][4]
CREATE TRIGGER IF NOT EXISTS d1saver_staged_removed AFTER DELETE ON d1saver_staged BEGIN DELETE FROM writes WHERE thread_id=OLD.staging_id; DELETE FROM d1saver_chunks WHERE thread_id=OLD.staging_id; DELETE FROM chunks WHERE thread_id=OLD.staging_id; DELETE FROM tags WHERE thread_id=OLD.staging_id; DELETE FROM checkpoints WHERE thread_id=OLD.staging_id; END

-- name: MIGRATIONS[11][5]
CREATE TABLE IF NOT EXISTS d1saver_staged_elsewhere(source_id TEXT NOT NULL,database_id TEXT NOT NULL,staging_id TEXT NOT NULL,expires_at INTEGER NOT NULL,PRIMARY KEY(source_id,database_id,staging_id))

-- name: MIGRATIONS[11][6]
CREATE TABLE IF NOT EXISTS d1saver_move_guards(move_voided INTEGER CONSTRAINT move_voided CHECK(move_voided IS NULL),staging_lost INTEGER CONSTRAINT staging_lost CHECK(staging_lost IS NULL))

-- name: MIGRATIONS[13][0]
CREATE TABLE IF NOT EXISTS d1saver_gc_pending(thread_id TEXT PRIMARY KEY)

-- name: MIGRATIONS[13][1]
CREATE TRIGGER IF NOT EXISTS checkpoints_gc_pending BEFORE INSERT ON checkpoints WHEN EXISTS(SELECT 1 FROM checkpoints WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND substr(checkpoint,1,2)='m:' AND checkpoint IS NOT NEW.checkpoint)BEGIN INSERT OR IGNORE INTO d1saver_gc_pending(thread_id)VALUES(NEW.thread_id); END

-- name: MIGRATIONS[13][2]
CREATE TRIGGER IF NOT EXISTS writes_gc_pending BEFORE INSERT ON writes WHEN EXISTS(SELECT 1 FROM writes WHERE thread_id=NEW.thread_id AND checkpoint_ns=NEW.checkpoint_ns AND checkpoint_id=NEW.checkpoint_id AND task_id=NEW.task_id AND idx=NEW.idx AND substr(value,1,2)IN('m:','p:')AND value IS NOT NEW.value)BEGIN INSERT OR IGNORE INTO d1saver_gc_pending(thread_id)VALUES(NEW.thread_id); END

-- name: MIGRATIONS[13][3]
INSERT OR IGNORE INTO d1saver_gc_pending(thread_id)SELECT DISTINCT thread_id FROM d1saver_chunks

-- name: MIGRATIONS[15][0]
ALTER TABLE store_vectors ADD COLUMN code TEXT
