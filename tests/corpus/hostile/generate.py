# Writes the hostile-input corpus (one JSONL file per queue; tests/corpus/hostile.rs says
# what each field means). Edit the cases here, run `python3 generate.py`, commit both.
import json
def ep(title, uri, aired="2026-01-01T00:00:00Z", **kw):
    d = {"initial_date_curated": "2026-01-10T08:00:00Z", "last_date_curated": "2026-01-11T08:00:00Z",
         "curator_information": "corpus", "date_aired": aired, "title": title,
         "description": "hostile corpus", "media_uri": uri, "media_type": "mp3", "priority": 0}
    d.update(kw); return d
def cl(title, uri, **kw):
    d = {"initial_date_curated": "2026-01-10T08:00:00Z", "last_date_curated": "2026-01-11T08:00:00Z",
         "curator_information": "corpus", "title": title,
         "description": "hostile corpus", "media_uri": uri, "media_type": "mp3", "priority": 0}
    d.update(kw); return d
def without(d, k):
    d = dict(d); d.pop(k); return d
out = {"curated_episodes": [], "curated_clips": [], "completed_research": []}
def case(queue, name, expect, reason=None, **kw):
    c = {"case": name, "expect": expect}
    if reason: c["reason"] = reason
    c.update(kw)
    out[queue].append(c)
E, C, R = "curated_episodes", "curated_clips", "completed_research"
def raw(d):  # compact JSON text, keys in the order written
    return json.dumps(d, ensure_ascii=False, separators=(",", ":"))

# ------------------------------------------------------------------ episodes
case(E, "base episode A", "stored", phase=0, json=ep("Base A", "https://corpus.test/e/a.mp3"))
case(E, "base episode B", "stored", phase=0, json=ep("Base B", "https://corpus.test/e/b.mp3", aired="2026-01-02T00:00:00Z", priority=5))
case(E, "not JSON", "poison", "not a valid EpisodeInfo", body="{not json")
case(E, "plain text", "poison", "expected a JSON object, found no JSON value", body="hello, archivist")
case(E, "truncated JSON", "poison", "EOF while parsing", body=raw(ep("Cut", "https://corpus.test/e/cut.mp3"))[:60])
case(E, "JSON array", "poison", "expected a JSON object, found an array", body="[1,2,3]")
case(E, "JSON null", "poison", "expected a JSON object, found null", body="null")
case(E, "JSON string", "poison", "expected a JSON object, found a string", body="\"an episode\"")
case(E, "JSON number", "poison", "expected a JSON object, found a number", body="42")
case(E, "two JSON objects in one body", "poison", "trailing characters", body=raw(ep("Twice", "https://corpus.test/e/twice.mp3")) * 2)
case(E, "byte-order mark before the JSON", "poison", "byte-order mark", body="\ufeff" + raw(ep("BOM", "https://corpus.test/e/bom.mp3")))
case(E, "invalid UTF-8", "poison", "not valid UTF-8", send="refused", body_hex="7b227469746c65223a2280ff227d")
case(E, "Latin-1 title bytes", "poison", "not valid UTF-8", send="refused", body_hex=(raw(ep("CAFE", "https://corpus.test/e/latin1.mp3")).encode().replace(b"CAFE", b"Caf\xe9")).hex())
case(E, "lone surrogate escape in the title", "poison", "title: unexpected end of hex escape", body=raw(ep("X", "https://corpus.test/e/sur.mp3")).replace('"title":"X"', '"title":"bad \\ud800 half"'))
case(E, "title is a number", "poison", "title: invalid type: integer", json=ep(42, "https://corpus.test/e/n.mp3"))
case(E, "title is null", "poison", "title: invalid type: null", json=ep(None, "https://corpus.test/e/null.mp3"))
case(E, "description is null", "poison", "description: invalid type: null", json=ep("Null description", "https://corpus.test/e/nd.mp3", description=None))
case(E, "priority is a string", "poison", "priority: invalid type: string", json=ep("P str", "https://corpus.test/e/ps.mp3", priority="high"))
case(E, "priority is a float", "poison", "priority: invalid type: floating point", json=ep("P float", "https://corpus.test/e/pf.mp3", priority=1.5))
case(E, "priority in exponent form", "poison", "priority: invalid type: floating point", body=raw(ep("P exp", "https://corpus.test/e/pe.mp3")).replace('"priority":0', '"priority":1e2'))
case(E, "priority past i32", "poison", "priority: invalid value", json=ep("P big", "https://corpus.test/e/pb.mp3", priority=2**31))
case(E, "priority past i64", "poison", "priority", body=raw(ep("P huge", "https://corpus.test/e/ph.mp3")).replace('"priority":0', '"priority":99999999999999999999999'))
case(E, "priority at i32 minimum", "stored", json=ep("P min", "https://corpus.test/e/pmin.mp3", priority=-2**31))
case(E, "priority is a boolean", "poison", "priority: invalid type: boolean", json=ep("P bool", "https://corpus.test/e/pbool.mp3", priority=True))
case(E, "date_aired is a number", "poison", "date_aired: invalid type: integer", json=ep("D num", "https://corpus.test/e/dn.mp3", aired=1767225600))
case(E, "date_aired is an object", "poison", "date_aired: invalid type: map", json=ep("D obj", "https://corpus.test/e/do.mp3", aired={"year": 2026}))
case(E, "missing title", "poison", "missing field `title`", json=without(ep("M", "https://corpus.test/e/mt.mp3"), "title"))
case(E, "missing date_aired", "poison", "missing field `date_aired`", json=without(ep("Missing aired", "https://corpus.test/e/ma.mp3"), "date_aired"))
case(E, "empty object", "poison", "missing field", body="{}")
case(E, "duplicated title key", "poison", "duplicate field `title`", body=raw(ep("Dup one", "https://corpus.test/e/dup.mp3")).replace('"title":"Dup one"', '"title":"Dup one","title":"Dup two"'))
case(E, "duplicated priority key", "poison", "duplicate field `priority`", body=raw(ep("Dup p", "https://corpus.test/e/dupp.mp3")).replace('"priority":0', '"priority":0,"priority":9'))
case(E, "unknown fields are ignored", "stored", json=ep("Unknown fields", "https://corpus.test/e/unknown.mp3", season=3, tags=["a", None, {"b": []}]))
case(E, "deep nesting in an unknown field", "stored", json=ep("Deep unknown", "https://corpus.test/e/deep.mp3", extra="@@DEEP@@"), fill={"DEEP": [["[", 200000], ["]", 200000]]})
case(E, "deep nesting in the title", "poison", "title: invalid type: sequence", json=ep("@@X@@", "https://corpus.test/e/deeptitle.mp3"), fill={"X": [["[", 200000], ["]", 200000]]})
case(E, "deep nesting, unclosed", "poison", "not a valid EpisodeInfo", body="\"@@X@@\"", fill={"X": [["{\"a\":", 100000]]})
case(E, "body at the size limit (1 MiB)", "stored", json=ep("At the limit", "https://corpus.test/e/limit.mp3"), pad_to=1048576)
case(E, "body one byte over the size limit", "poison", "exceeds the limit", send="refused", json=ep("Over the limit", "https://corpus.test/e/over.mp3"), pad_to=1048577)
case(E, "title of 1,024 characters", "stored", json=ep("@@T@@", "https://corpus.test/e/t1024.mp3"), fill={"T": [["\"", 1], ["t", 1024], ["\"", 1]]})
case(E, "title of 1,025 characters", "poison", "title: 1025 characters, at most 1024", json=ep("@@T@@", "https://corpus.test/e/t1025.mp3"), fill={"T": [["\"", 1], ["t", 1025], ["\"", 1]]})
case(E, "title of 1,024 emoji (4,096 bytes)", "stored", json=ep("@@T@@", "https://corpus.test/e/emoji1024.mp3"), fill={"T": [["\"", 1], ["\U0001F4FB", 1024], ["\"", 1]]})
case(E, "description of 65,536 characters", "stored", json=ep("Long description", "https://corpus.test/e/d64k.mp3", description="@@D@@"), fill={"D": [["\"", 1], ["d", 65536], ["\"", 1]]})
case(E, "description of 65,537 characters", "poison", "description: 65537 characters", json=ep("Too long description", "https://corpus.test/e/d64k1.mp3", description="@@D@@"), fill={"D": [["\"", 1], ["d", 65537], ["\"", 1]]})
case(E, "media_uri of 1,025 characters", "poison", "media_uri: 1025 characters", json=ep("Long uri", "@@U@@"), fill={"U": [["\"https://corpus.test/", 1], ["u", 1005], ["\"", 1]]})
case(E, "empty title", "poison", "title: must not be empty", json=ep("", "https://corpus.test/e/empty.mp3"))
case(E, "whitespace-only title", "poison", "title: must not be empty", json=ep(" \t\u3000 ", "https://corpus.test/e/ws.mp3"))
case(E, "empty media_uri", "poison", "media_uri: must not be empty", json=ep("No uri", ""))
case(E, "NUL character in the title", "poison", "title: contains a NUL character", json=ep("nul\u0000title", "https://corpus.test/e/nul.mp3"))
case(E, "NUL character in the description", "poison", "description: contains a NUL character", json=ep("Nul description", "https://corpus.test/e/nuld.mp3", description="a\u0000b"))
case(E, "SQL-looking title", "stored", json=ep("Robert'); DROP TABLE episodes;-- \" OR 1=1", "https://corpus.test/e/sql.mp3"))
case(E, "SQL-looking media_uri", "stored", json=ep("SQL uri", "x' OR '1'='1; DELETE FROM bus_messages;--"))
case(E, "control characters in the title", "stored", json=ep("bell\u0007 tab\t escape\u001b[31m red\u001b[0m del\u007f", "https://corpus.test/e/ctl.mp3"))
case(E, "right-to-left override in the title", "stored", json=ep("abc\u202egnp.exe \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627", "https://corpus.test/e/rtl.mp3"))
case(E, "emoji, ZWJ sequences and a variation selector", "stored", json=ep("\U0001F469\u200d\U0001F4BB \U0001F3F3\ufe0f\u200d\U0001F308 \u2764\ufe0f", "https://corpus.test/e/emoji.mp3"))
case(E, "title in NFC", "stored", json=ep("Caf\u00e9 Society", "https://corpus.test/e/nfc.mp3"))
case(E, "the same title in NFD: another episode", "stored", json=ep("Cafe\u0301 Society", "https://corpus.test/e/nfd.mp3"))
case(E, "title with a trailing space: another episode", "stored", json=ep("Base A ", "https://corpus.test/e/a-space.mp3"))
case(E, "trailing-space title with Base A's media_uri", "poison", "conflict", json=ep("Base A  ", "https://corpus.test/e/a.mp3"))
case(E, "new episode with Base A's media_uri", "poison", "conflict", json=ep("Thief", "https://corpus.test/e/a.mp3", aired="2026-03-01T00:00:00Z"))
case(E, "clip's media_uri on an episode (unique per kind only)", "stored", json=ep("Shares a clip uri", "https://corpus.test/c/x.mp3"))
case(E, "twins with one media_uri in one batch (1)", "one_stored", "conflict", group="uri twins", json=ep("Twin one", "https://corpus.test/e/twin.mp3"))
case(E, "twins with one media_uri in one batch (2)", "one_stored", "conflict", group="uri twins", json=ep("Twin two", "https://corpus.test/e/twin.mp3"))
case(E, "same episode, conflicting fields, in one batch (1)", "stored", json=ep("Conflicted", "https://corpus.test/e/conf1.mp3", priority=1, description="first"))
case(E, "same episode, conflicting fields, in one batch (2)", "stored", json=ep("Conflicted", "https://corpus.test/e/conf2.mp3", priority=7, description="second"))
case(E, "same episode, conflicting fields, in one batch (3)", "stored", json=ep("Conflicted", "https://corpus.test/e/conf1.mp3", priority=3, last_date_curated="2026-01-12T08:00:00Z"))
case(E, "new episode last curated before first curated", "poison", "before it was first curated", json=ep("Time travel", "https://corpus.test/e/tt.mp3", last_date_curated="2020-01-01T00:00:00Z"))
case(E, "date_aired not a date", "poison", "date_aired", json=ep("Yesterday", "https://corpus.test/e/y.mp3", aired="yesterday"))
case(E, "date_aired without a zone", "poison", "RFC 3339", json=ep("No zone", "https://corpus.test/e/nz.mp3", aired="2026-01-01T00:00:00"))
case(E, "date_aired on 30 February", "poison", "date_aired", json=ep("Feb 30", "https://corpus.test/e/f30.mp3", aired="2026-02-30T00:00:00Z"))
case(E, "date_aired at hour 25", "poison", "date_aired", json=ep("Hour 25", "https://corpus.test/e/h25.mp3", aired="2026-01-01T25:00:00Z"))
case(E, "date_aired with a +14:00 zone", "stored", json=ep("Kiribati", "https://corpus.test/e/kiribati.mp3", aired="2026-01-01T00:00:00+14:00"))
case(E, "date_aired in year 0000", "poison", "date_aired: year 0 is out of range", json=ep("Year zero", "https://corpus.test/e/y0.mp3", aired="0000-01-01T00:00:00Z"))
case(E, "date_aired in year 0001", "stored", json=ep("Year one", "https://corpus.test/e/y1.mp3", aired="0001-01-01T00:00:00Z"))
case(E, "date_aired in year 9999", "stored", json=ep("Year 9999", "https://corpus.test/e/y9999.mp3", aired="9999-12-31T23:59:59.999999Z"))
case(E, "date_aired in year 10000 (past RFC 3339)", "poison", "date_aired", json=ep("Year 10000", "https://corpus.test/e/y10000.mp3", aired="+10000-01-01T00:00:00Z"))
case(E, "date_aired before Postgres's range", "poison", "date_aired", json=ep("Before Postgres", "https://corpus.test/e/bpg.mp3", aired="-5000-01-01T00:00:00Z"))
case(E, "date_aired past Postgres's range", "poison", "date_aired", json=ep("After Postgres", "https://corpus.test/e/apg.mp3", aired="+294277-01-01T00:00:00Z"))
case(E, "negative-year initial_date_curated", "poison", "initial_date_curated", json=ep("Negative year", "https://corpus.test/e/ny.mp3", initial_date_curated="-0001-01-01T00:00:00Z"))
case(E, "leap second", "stored", json=ep("Leap second", "https://corpus.test/e/leap.mp3", aired="2016-12-31T23:59:60Z"))
case(E, "nanosecond twins: one episode at microsecond precision (1)", "stored", json=ep("Nano", "https://corpus.test/e/nano1.mp3", aired="2026-01-05T00:00:00.000000001Z"))
case(E, "nanosecond twins: one episode at microsecond precision (2)", "stored", json=ep("Nano", "https://corpus.test/e/nano2.mp3", aired="2026-01-05T00:00:00.000000002Z"))
case(E, "timestamp with 30 fraction digits", "stored", json=ep("Long fraction", "https://corpus.test/e/frac.mp3", aired="2026-01-06T00:00:00.123456789012345678901234567890Z"))

# ------------------------------------------------------------------ clips
case(C, "base clip X", "stored", phase=0, json=cl("Clip X", "https://corpus.test/c/x.mp3", priority=9))
case(C, "base clip Y", "stored", phase=0, json=cl("Clip Y", "https://corpus.test/c/y.mp3", priority=5))
case(C, "base clip Z", "stored", phase=0, json=cl("Clip Z", "https://corpus.test/c/z.mp3", priority=1))
case(C, "an episode on the clips queue (date_aired is an unknown field)", "stored", json=ep("Clip W", "https://corpus.test/c/w.mp3"))
case(C, "not JSON", "poison", "not a valid ClipInfo", body="<clip/>")
case(C, "invalid UTF-8", "poison", "not valid UTF-8", send="refused", body_hex="fffefd")
case(C, "byte-order mark", "poison", "byte-order mark", body="\ufeff" + raw(cl("BOM clip", "https://corpus.test/c/bom.mp3")))
case(C, "missing media_type", "poison", "missing field `media_type`", json=without(cl("No type", "https://corpus.test/c/nt.mp3"), "media_type"))
case(C, "media_type null", "poison", "media_type: invalid type: null", json=cl("Null type", "https://corpus.test/c/null.mp3", media_type=None))
case(C, "duplicated media_uri key", "poison", "duplicate field `media_uri`", body=raw(cl("Dup uri", "https://corpus.test/c/d1.mp3")).replace('"media_uri":"https://corpus.test/c/d1.mp3"', '"media_uri":"https://corpus.test/c/d1.mp3","media_uri":"https://corpus.test/c/d2.mp3"'))
case(C, "new clip with Clip X's media_uri", "poison", "conflict", json=cl("Clip thief", "https://corpus.test/c/x.mp3"))
case(C, "Clip Z again with another media_uri: an update", "stored", json=cl("Clip Z", "https://corpus.test/c/z2.mp3", priority=1))
case(C, "NUL in the curator", "poison", "curator_information: contains a NUL character", json=cl("Nul curator", "https://corpus.test/c/nc.mp3", curator_information="a\u0000"))
case(C, "SQL-looking title", "stored", json=cl("'; UPDATE clips SET priority = 99; --", "https://corpus.test/c/sql.mp3"))
case(C, "trailing-space title: another clip", "stored", json=cl("Clip X ", "https://corpus.test/c/x-space.mp3"))
case(C, "title of 1,025 characters", "poison", "title: 1025 characters", json=cl("@@T@@", "https://corpus.test/c/t1025.mp3"), fill={"T": [["\"", 1], ["c", 1025], ["\"", 1]]})
case(C, "deep nesting in an unknown field", "stored", json=cl("Deep clip", "https://corpus.test/c/deep.mp3", extra="@@DEEP@@"), fill={"DEEP": [["{\"a\":", 150000], ["0", 1], ["}", 150000]]})
case(C, "date out of range", "poison", "last_date_curated", json=cl("Clip from the future", "https://corpus.test/c/fut.mp3", last_date_curated="+200000-01-01T00:00:00Z"))

# ------------------------------------------------------------------ results
def res(episode, clip, lease="$LEASE_ACTIVE", **kw):
    d = {"lease_id": lease, "revoke_lease": False, "research_date": "2026-02-01T12:00:00Z",
         "episode": episode, "clip": clip, "episode_duration_ns": 3600000000000, "episode_hash": "eh",
         "clip_duration_ns": 4000000000, "clip_hash": "ch", "clip_offsets_ns": [120000000000]}
    d.update(kw); return d
A = ep("Base A", "https://corpus.test/e/a.mp3")
B = ep("Base B", "https://corpus.test/e/b.mp3", aired="2026-01-02T00:00:00Z", priority=5)
X = cl("Clip X", "https://corpus.test/c/x.mp3", priority=9)
Y = cl("Clip Y", "https://corpus.test/c/y.mp3", priority=5)
Z = cl("Clip Z", "https://corpus.test/c/z.mp3", priority=1)
W = cl("Clip W", "https://corpus.test/c/w.mp3")
case(R, "result under the active lease", "stored", json=res(B, X))
case(R, "result under an unknown lease", "stored", json=res(B, Y, lease="00000000-0000-4000-8000-000000000001"))
case(R, "result under an expired lease", "stored", json=res(A, X, lease="$LEASE_EXPIRED"))
case(R, "result under a revoked lease", "stored", json=res(A, Y, lease="$LEASE_REVOKED", revoke_lease=True))
case(R, "revoking an unknown lease", "stored", json=res(A, Z, lease="00000000-0000-4000-8000-000000000002", revoke_lease=True, clip_offsets_ns=[]))
case(R, "the same result twice (1)", "stored", json=res(B, Z))
case(R, "the same result twice (2)", "stored", json=res(B, Z))
case(R, "lease_id not a UUID", "poison", "lease_id", json=res(A, W, lease="lease-42"))
case(R, "lease_id null", "poison", "lease_id: invalid type: null", json=res(A, W, lease=None))
case(R, "lease_id missing", "poison", "missing field `lease_id`", json=without(res(A, W), "lease_id"))
case(R, "revoke_lease as a string", "poison", "revoke_lease: invalid type: string", json=res(A, W, revoke_lease="yes"))
case(R, "unknown episode", "poison", "unknown episode", json=res(ep("Never curated", "https://corpus.test/e/never.mp3"), X))
case(R, "known title, other date_aired: unknown episode", "poison", "unknown episode", json=res(ep("Base A", "https://corpus.test/e/a.mp3", aired="2027-01-01T00:00:00Z"), X))
case(R, "unknown clip", "poison", "unknown clip", json=res(A, cl("Never curated clip", "https://corpus.test/c/never.mp3")))
case(R, "invalid embedded episode", "poison", "episode.title: must not be empty", json=res(ep("", "https://corpus.test/e/a.mp3"), X))
case(R, "negative offset", "poison", "clip_offsets_ns: offset -1 is negative", json=res(A, W, clip_offsets_ns=[5, -1]))
case(R, "offset beyond the episode's length", "poison", "beyond the episode's length", json=res(A, W, clip_offsets_ns=[3600000000001]))
case(R, "offset at the episode's end", "stored", json=res(ep("Shares a clip uri", "https://corpus.test/c/x.mp3"), X, clip_offsets_ns=[3600000000000]))
case(R, "offsets as strings", "poison", "clip_offsets_ns", json=res(A, W, clip_offsets_ns=["1", "2"]))
case(R, "offset as a float", "poison", "clip_offsets_ns", json=res(A, W, clip_offsets_ns=[1.5]))
case(R, "offset past i64", "poison", "clip_offsets_ns", body=raw(res(A, W)).replace('"clip_offsets_ns":[120000000000]', '"clip_offsets_ns":[9223372036854775808]'))
case(R, "offsets null", "poison", "clip_offsets_ns: invalid type: null", json=res(A, W, clip_offsets_ns=None))
case(R, "100,000 offsets (the limit)", "stored", json=res(ep("Shares a clip uri", "https://corpus.test/c/x.mp3"), Y, clip_offsets_ns="@@O@@"), fill={"O": [["[", 1], ["1,", 99999], ["1]", 1]]})
case(R, "100,001 offsets", "poison", "at most 100000 offsets", json=res(A, W, clip_offsets_ns="@@O@@"), fill={"O": [["[", 1], ["1,", 100000], ["1]", 1]]})
case(R, "500,000 offsets in 1 MiB", "poison", "at most 100000 offsets", json=res(A, W, clip_offsets_ns="@@O@@"), fill={"O": [["[", 1], ["0,", 500000], ["0]", 1]]})
case(R, "negative episode duration", "poison", "episode_duration_ns: must not be negative", json=res(A, W, episode_duration_ns=-1, clip_offsets_ns=[]))
case(R, "negative clip duration", "poison", "clip_duration_ns: must not be negative", json=res(A, W, clip_duration_ns=-4000000000))
case(R, "absurd episode duration (292 years)", "poison", "episode_duration_ns: 9223372036854775807 ns is over 30 days", json=res(A, W, episode_duration_ns=9223372036854775807))
case(R, "absurd clip duration", "poison", "clip_duration_ns: 9223372036854775807 ns is over 30 days", json=res(A, W, clip_duration_ns=9223372036854775807, clip_offsets_ns=[]))
case(R, "duration as a string", "poison", "episode_duration_ns: invalid type: string", json=res(A, W, episode_duration_ns="1h"))
case(R, "research_date out of range", "poison", "research_date", json=res(A, W, research_date="+100000-01-01T00:00:00Z"))
case(R, "research_date not a date", "poison", "research_date", json=res(A, W, research_date="2026-13-01T00:00:00Z"))
case(R, "episode_hash of 1,025 characters", "poison", "episode_hash: 1025 characters", json=res(A, W, episode_hash="@@H@@"), fill={"H": [["\"", 1], ["h", 1025], ["\"", 1]]})
case(R, "NUL in the clip hash", "poison", "clip_hash: contains a NUL character", json=res(A, W, clip_hash="h\u0000"))
case(R, "result with unknown fields, deep nesting and RTL hash", "stored", json=res(A, W, confidence=[[[[0.9]]]], clip_hash="\u202eabc", clip_offsets_ns=[]))
case(R, "a work item sent to the results queue", "poison", "missing field", json={"lease_id": "00000000-0000-4000-8000-000000000003", "lease_expires_at": "2026-02-01T12:00:00Z", "episode": A, "clips": [X]})

for q, cases in out.items():
    with open(f"{q}.jsonl", "w") as f:
        for c in cases:
            f.write(json.dumps(c, ensure_ascii=False, separators=(", ", ": ")) + "\n")
    print(q, len(cases))
