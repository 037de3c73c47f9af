"""What a man page says beyond `--help`: examples, exit status, environment, files, related pages.

`python -m klog.cli.gendocs` builds each man page from the command's `--help` (NAME, SYNOPSIS,
DESCRIPTION, ARGUMENTS, OPTIONS, COMMANDS) and from the entry here (EXAMPLES, EXIT STATUS,
ENVIRONMENT, FILES, SEE ALSO), so the pages cannot drift from the CLI. Examples are shell lines
(`command  # what it does`); tests/test_docs_fresh.py runs them against a scratch store holding the
topics `orders` (3 partitions, 300 keyed records) and `events`, unless the entry says why not
(`not_run`). Environment variables that an option reads (`envvar=`) are found in the CLI itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    examples: str = ""
    exit_status: tuple[tuple[str, str], ...] = ()  # besides the ones every command has
    environment: tuple[tuple[str, str], ...] = ()  # besides the options' own envvars
    files: tuple[tuple[str, str], ...] = ()
    see_also: tuple[str, ...] = ()  # other pages: "klog-consume", "kcat"
    doc: str = ""  # the docs/ page that explains the subject
    not_run: str = ""  # why tests do not run the examples (a cluster, Spark, a port)


EXIT_STATUS = (
    ("0", "Success."),
    ("1", "Runtime failure: an unknown topic or group, no store at --data-dir, a deleted topic, a corrupt "
          "log, a record too large, a refused write. One line on stderr says what went wrong."),
    ("2", "Usage error: a bad option or argument, or a required argument not given (a topic to read, a group)."),
    ("130", "Interrupted (Ctrl-C); work in progress is finished or left as it was."),
    ("143", "Terminated (SIGTERM), as for Ctrl-C."),
)
STORE_FILES = (
    ("~/.local/share/klog", "The default store (the XDG data directory; --data-dir or KLOG_DATA_DIR "
                            "picks another)."),
    ("<store>/klog.json", "Log directories and store defaults (num.partitions, ...)."),
    ("<store>/meta/", "LMDB: topics, groups, users, ACLs, quotas."),
    ("<store>/logs/<topic>-<partition>/", "Segments and indexes, as Kafka names them."),
)
COLOR_ENV = (("NO_COLOR", "Set to anything: no colours or bold on a terminal."),
             ("TZ", "Set: times on a terminal in the local time zone (as --local-time)."))
CLUSTER_ENV = (("KLOG_CLUSTER_TIMEOUT", "Seconds before a cluster that does not answer is an error (10); "
                                        "a refused connection fails at once."),)
DIR_MODE_ENV = (("KLOG_DIR_MODE", "Mode of new store folders (default 0700; 2750 lets the group read)."),)
SPARK_ENV = (("JAVA_HOME", "The Java 17+ that runs Spark (else java on PATH)."),
             ("KLOG_SPARK_CDS", "0: do not record Spark's JVM classes in ~/.cache/klog."),
             ("PYSPARK_PYTHON", "The interpreter of Spark's Python workers (klog sets its own)."))
SPARK = dict(environment=SPARK_ENV, doc="spark.md", not_run="needs the spark extra and Java 17; ~12 s a command")

MANUAL: dict[str, Entry] = {
    "klog": Entry(
        examples="""seq 1 5 | klog produce numbers          # one record per line; the topic is created
klog consume numbers                     # to the current end, then exit
klog topics describe orders              # partitions, replicas, offsets, size
klog --version""",
        environment=DIR_MODE_ENV, files=STORE_FILES, see_also=("kcat",), doc=""),
    "klog produce": Entry(
        examples="""seq 1 5 | klog produce numbers                       # one record per line
printf 'user-1:login\\nuser-2:logout\\n' | klog produce events -K:   # key:value
klog consume orders --json | klog produce orders-copy --input json   # a lossless copy
find . -print0 | klog produce files -D '\\0'            # NUL-separated records
klog produce events -k fixed-key -H source=man < /dev/null""",
        exit_status=(("1", "A record over max.message.bytes, or a refused write: the records before it "
                           "were written, and the line says how many."),
                     ("2", "A bad --input json line (line N), or a bad option.")),
        environment=CLUSTER_ENV + DIR_MODE_ENV, files=STORE_FILES,
        see_also=("klog-consume", "klog-topics-create", "kcat"), doc="viewer.md"),
    "klog consume": Entry(
        examples="""klog consume orders                              # like cat: to the current end, then exit
klog consume orders -f                           # like tail -f
klog consume orders --format '%p@%o %k=%s\\n'     # kcat-style format tokens
klog consume orders --since '15m ago' --grep 'v1' # time ranges and filters
klog consume orders --last 5                     # the 5 newest records of the topic
klog consume orders --group billing -n 10        # as a consumer group member
klog consume orders --json | head -1             # the envelope produce --input json reads
klog consume -t orders -c 3 -e -q -K ' => '      # kcat's spellings: -t, -c, -e, -q, -K""",
        exit_status=(("1", "A read that could not be completed (damage, a deleted topic, a failing "
                           "--exec command): never a silent short read; also an unknown topic or no "
                           "store at --data-dir."),),
        environment=COLOR_ENV + CLUSTER_ENV + (
            ("KLOG_TOPIC, KLOG_PARTITION, KLOG_OFFSET, KLOG_COUNT", "Set for the --exec command."),),
        files=STORE_FILES, see_also=("klog-produce", "klog-groups", "kcat"), doc="viewer.md"),
    "klog offsets": Entry(
        examples="""klog offsets orders                       # latest offset per partition
klog offsets orders --time earliest
klog offsets orders --time 2026-11-22T10:00:00Z   # first offset at or after a time""",
        environment=CLUSTER_ENV, files=STORE_FILES, see_also=("klog-consume",), doc="viewer.md"),
    "klog dump": Entry(
        examples="""klog dump orders-0 | head                 # batches and records of a partition
klog dump ~/.local/share/klog/logs/orders-0/00000000000000000000.log | head -3""",
        files=STORE_FILES, see_also=("klog-verify",), doc="storage.md"),
    "klog verify": Entry(
        examples="""klog verify                               # every topic: CRCs, indexes, segments, state
klog verify orders --json
klog verify --repair                      # rebuild, truncate torn tails, re-copy damaged replicas""",
        exit_status=(("1", "Something is damaged (each problem is one line with file, position and "
                           "offset), or --repair could not fix it; also an unknown topic or no store "
                           "at --data-dir."),),
        files=STORE_FILES, see_also=("klog-dump",), doc="durability.md"),
    "klog replay": Entry(
        examples="""klog replay orders --to orders-copy                  # everything, as fast as possible
klog replay orders --to staging --since 1h --speed 1 --keep-timestamps   # at the original pace
klog replay orders --to staging --group nightly --rate 5000   # a rerun resumes, no duplicates
klog replay orders --since 10m --speed 10 --json | tail -1   # to stdout""",
        files=STORE_FILES + (("<store>/state/replay/<group>.json", "Progress of a replay --group."),),
        environment=CLUSTER_ENV, see_also=("klog-mirror", "klog-consume"), doc="lifecycle.md"),
    "klog serve": Entry(
        examples="""klog serve                                   # 127.0.0.1:9092, the default store
klog serve --listen 0.0.0.0:9092 --advertised-listener kafka.example.com:9092 --insecure -v
kcat -b 127.0.0.1:9092 -L                    # from another shell: one broker, the store's topics""",
        exit_status=(("0", "Stopped by SIGTERM or Ctrl-C after answering the requests in flight."),),
        environment=(("KLOG_SERVE_NO_IO_URING", "Set to anything: every append takes an append thread, none is "
                      "appended on the event loop with its fsync through io_uring."),),
        files=STORE_FILES, see_also=("klog-users", "klog-acls", "klog-quotas", "kcat"), doc="serve.md",
        not_run="listens on a fixed port until stopped"),
    "klog registry": Entry(
        examples="""klog registry                                # http://127.0.0.1:8081, the store's _schemas topic
klog registry --listen 0.0.0.0:8081 -b kafka1:9092   # schemas kept in a Kafka cluster
curl -s 127.0.0.1:8081/subjects              # from another shell""",
        exit_status=(("0", "Stopped by SIGTERM or Ctrl-C."), ("1", "The port is in use.")),
        files=STORE_FILES, environment=CLUSTER_ENV, see_also=("klog-connect-run", "klog-serve"),
        doc="schema-registry.md", not_run="listens on a fixed port until stopped"),
    "klog connect": Entry(
        examples="""klog connect run file-source.properties            # until Ctrl-C; offsets in connect-offsets
klog connect run pg-cdc.json sqlite-sink.json -b kafka1:9092""",
        files=STORE_FILES, see_also=("klog-connect-run",), doc="connect.md",
        not_run="runs connectors until stopped (a database, a cluster)"),
    "klog connect run": Entry(
        examples="""klog connect run file-source.properties            # Kafka's FileStreamSource config as it is
klog connect run pg-cdc.json sqlite-sink.json      # Debezium's and Confluent's configs
klog connect run -w worker.properties sink.json    # worker settings: converters, offset.flush.interval.ms""",
        exit_status=(("1", "A task failed and none is left running; its one-line reason on stderr."),
                     ("2", "A config refused before anything started; the failing field named.")),
        files=STORE_FILES, see_also=("klog-produce", "klog-consume"), doc="connect.md",
        not_run="runs connectors until stopped (a database, a cluster)"),
    "klog connect worker": Entry(
        examples="""klog connect worker --group-id etl sink.json      # submits sink.json, runs its share of tasks
klog connect worker --group-id etl                # another worker (here or on another machine)""",
        files=STORE_FILES, see_also=("klog-connect-run",), doc="connect.md",
        not_run="runs until stopped"),
    "klog connect list": Entry(
        examples="""klog connect list                                  # name, type, state, task states
KLOG_CONNECT_URL=http://127.0.0.1:8084 klog connect list""",
        see_also=("klog-connect-run",), doc="connect.md", not_run="needs a running worker's REST API"),
    "klog connect status": Entry(
        examples="""klog connect status shop-cdc                        # Kafka Connect's status JSON, traces included
KLOG_CONNECT_URL=http://127.0.0.1:8084 klog connect status shop-cdc""",
        see_also=("klog-connect-run",), doc="connect.md", not_run="needs a running worker's REST API"),
    "klog connect pause": Entry(
        examples="""klog connect pause shop-cdc
KLOG_CONNECT_URL=http://127.0.0.1:8084 klog connect pause shop-cdc""",
        see_also=("klog-connect-run",), doc="connect.md", not_run="needs a running worker's REST API"),
    "klog connect resume": Entry(
        examples="""klog connect resume shop-cdc
KLOG_CONNECT_URL=http://127.0.0.1:8084 klog connect resume shop-cdc""",
        see_also=("klog-connect-run",), doc="connect.md", not_run="needs a running worker's REST API"),
    "klog connect restart": Entry(
        examples="""klog connect restart shop-cdc                       # e.g. after a task FAILED
KLOG_CONNECT_URL=http://127.0.0.1:8084 klog connect restart shop-cdc""",
        see_also=("klog-connect-run",), doc="connect.md", not_run="needs a running worker's REST API"),
    "klog connect delete": Entry(
        examples="""klog connect delete shop-cdc                        # its offsets stay in connect-offsets
KLOG_CONNECT_URL=http://127.0.0.1:8084 klog connect delete shop-cdc""",
        see_also=("klog-connect-run",), doc="connect.md", not_run="needs a running worker's REST API"),
    "klog mirror": Entry(
        examples="""klog mirror ~/.local/share/klog ~/copy orders    # store -> store, checkpointed
klog mirror ~/.local/share/klog ~/copy orders    # a rerun copies only what is new
klog mirror kafka1:9092 ~/copy --pattern 'orders.*'      # cluster -> store
klog mirror ~/.local/share/klog kafka1:9092 --follow     # store -> cluster, until Ctrl-C""",
        environment=CLUSTER_ENV, files=STORE_FILES, see_also=("klog-replay", "klog-clusters"), doc="clusters.md",
        not_run="the last two need a Kafka cluster"),
    "klog topics": Entry(
        examples="""klog topics create events2 -p 6 -c retention.ms=86400000
klog topics list
klog topics describe orders
klog topics alter events2 -p 8""",
        environment=CLUSTER_ENV, files=STORE_FILES, see_also=("klog-dirs",), doc="storage.md"),
    "klog topics create": Entry(
        examples="""klog topics create payments -p 6 -r 1 -c retention.ms=86400000
klog topics create users -c cleanup.policy=compact
klog topics create payments --if-not-exists      # exit 0, left unchanged""",
        environment=CLUSTER_ENV + DIR_MODE_ENV, files=STORE_FILES, see_also=("klog-topics-alter",),
        doc="storage.md"),
    "klog topics list": Entry(
        examples="""klog topics list
klog topics list --json""", environment=CLUSTER_ENV, files=STORE_FILES, doc="storage.md"),
    "klog topics describe": Entry(
        examples="""klog topics describe orders      # leader, replicas, ISR, log start, HW, log end, size
klog topics describe orders --json""", environment=CLUSTER_ENV, files=STORE_FILES, doc="replication.md"),
    "klog topics alter": Entry(
        examples="""klog topics alter events -p 2                       # more partitions
klog topics alter events -c retention.ms=3600000
klog topics alter events --delete-config retention.ms""",
        environment=CLUSTER_ENV, files=STORE_FILES, doc="storage.md"),
    "klog topics delete": Entry(
        examples="""klog topics delete events --yes""",
        exit_status=(("1", "The prompt was declined, or the topic or the store does not exist: nothing "
                           "deleted."),),
        environment=CLUSTER_ENV, files=STORE_FILES, doc="durability.md"),
    "klog topics clean": Entry(
        examples="""klog topics clean                 # retention (and due compaction) on every topic
klog topics clean orders""", files=STORE_FILES, see_also=("klog-topics-compact",), doc="lifecycle.md"),
    "klog topics compact": Entry(
        examples="""klog topics create users -c cleanup.policy=compact
printf 'u1:a\\nu1:b\\n' | klog produce users -K:
klog topics compact users         # latest value per key, offsets unchanged""",
        files=STORE_FILES, see_also=("klog-topics-clean",), doc="lifecycle.md"),
    "klog topics delete-records": Entry(
        examples="""klog topics delete-records orders --before 50 -p 0     # log start -> 50
klog topics delete-records orders --before 2d          # the first record at/after a time""",
        files=STORE_FILES, see_also=("klog-topics-clean",), doc="lifecycle.md"),
    "klog topics reassign": Entry(
        examples="""klog dirs add ~/disk1/klog
klog topics reassign orders --from 0 --to 1 -p 0     # move a replica between log directories""",
        files=STORE_FILES, see_also=("klog-dirs",), doc="replication.md"),
    "klog dirs": Entry(
        examples="""klog dirs add ~/disk1/klog
klog dirs list""", files=STORE_FILES, see_also=("klog-topics-reassign",), doc="replication.md"),
    "klog dirs list": Entry(examples="klog dirs list      # id, path, health, size, replicas, leaders",
                            files=STORE_FILES, doc="replication.md"),
    "klog dirs add": Entry(examples="klog dirs add ~/disk1/klog", environment=DIR_MODE_ENV,
                           files=STORE_FILES, doc="replication.md"),
    "klog dirs remove": Entry(
        examples="""klog dirs add ~/disk1/klog
klog dirs remove 1      # move every replica off directory 1, then forget it""",
        files=STORE_FILES, doc="replication.md"),
    "klog dirs import": Entry(
        examples="klog dirs import /var/lib/kafka/data      # a broker's log directory",
        files=STORE_FILES, see_also=("klog-dirs-checkpoint",), doc="storage.md",
        not_run="needs a Kafka broker's log directory"),
    "klog dirs checkpoint": Entry(
        examples="klog dirs checkpoint      # Kafka's checkpoint files, before handing the directories to a broker",
        files=STORE_FILES + (("<log dir>/replication-offset-checkpoint", "High watermarks, as Kafka's."),),
        see_also=("klog-dirs-import",), doc="storage.md"),
    "klog groups": Entry(
        examples="""klog consume orders --group billing -n 10 > /dev/null
klog groups list
klog groups describe billing""", environment=CLUSTER_ENV, files=STORE_FILES,
        see_also=("klog-consume",), doc="groups.md"),
    "klog groups list": Entry(examples="klog groups list      # state, live members, generation, assignor",
                              environment=CLUSTER_ENV, files=STORE_FILES, doc="groups.md"),
    "klog groups describe": Entry(
        examples="""klog consume orders --group billing -n 10 > /dev/null
klog groups describe billing             # committed offset, log end and lag per partition
klog groups describe billing --members""",
        environment=CLUSTER_ENV, files=STORE_FILES, doc="groups.md"),
    "klog groups reset-offsets": Entry(
        examples="""klog consume orders --group billing -n 10 > /dev/null
klog groups reset-offsets billing --topic orders --to-earliest           # dry run: the plan
klog groups reset-offsets billing --topic orders:0 --shift-by -1 --execute
klog groups reset-offsets billing --all-topics --to-latest --export > plan.csv""",
        exit_status=(("1", "--execute while the group has live members (they are named), an unknown "
                           "topic, or no store at --data-dir."),),
        environment=CLUSTER_ENV, files=STORE_FILES, doc="groups.md"),
    "klog groups delete": Entry(
        examples="""klog consume orders --group billing -n 10 > /dev/null
klog groups delete billing""", environment=CLUSTER_ENV, files=STORE_FILES, doc="groups.md"),
    "klog groups delete-offsets": Entry(
        examples="""klog consume orders --group billing -n 10 > /dev/null
klog groups delete-offsets billing --topic orders""",
        environment=CLUSTER_ENV, files=STORE_FILES, doc="groups.md"),
    "klog groups clean": Entry(examples="klog groups clean      # expire old committed offsets now (cron it)",
                               files=STORE_FILES, doc="serve.md"),
    "klog transactions": Entry(
        examples="""seq 1 100 | klog produce events --transactional-id load-1   # all 100 or none
klog transactions list
klog transactions describe load-1""", files=STORE_FILES, see_also=("klog-produce", "klog-serve"),
        doc="transactions.md"),
    "klog transactions list": Entry(
        examples="""seq 1 3 | klog produce events --transactional-id load-1
klog transactions list          # state, producer id and epoch, open partitions""",
        files=STORE_FILES, doc="transactions.md"),
    "klog transactions describe": Entry(
        examples="""seq 1 3 | klog produce events --transactional-id load-1
klog transactions describe load-1 --json""", files=STORE_FILES, doc="transactions.md"),
    "klog transactions find-hanging": Entry(
        examples="""seq 1 3 | klog produce events --transactional-id load-1
klog transactions find-hanging --topic events   # open past transaction.max.timeout.ms, no coordinator's
# each one found: klog transactions abort --topic events --partition P --start-offset O""",
        files=STORE_FILES, doc="transactions.md"),
    "klog transactions abort": Entry(
        examples="""seq 1 3 | klog produce events --transactional-id load-1
klog transactions abort load-1  # a hanging transaction: ABORT markers, producer fenced""",
        files=STORE_FILES, doc="transactions.md"),
    "klog clusters": Entry(
        examples="""klog clusters add prod -b kafka1:9093,kafka2:9093 -X security.protocol=SASL_SSL
klog clusters list                    # secrets print as ***
klog topics list --cluster prod""",
        files=(("<store>/clusters.json", "The named clusters."),), doc="clusters.md",
        not_run="the last line needs a Kafka cluster"),
    "klog clusters add": Entry(
        examples="klog clusters add prod -b kafka1:9093 -X security.protocol=SASL_SSL -X sasl.mechanism=PLAIN",
        files=(("<store>/clusters.json", "The named clusters."),), doc="clusters.md"),
    "klog clusters list": Entry(examples="klog clusters list --json",
                                files=(("<store>/clusters.json", "The named clusters."),), doc="clusters.md"),
    "klog clusters remove": Entry(
        examples="""klog clusters add prod -b kafka1:9093
klog clusters remove prod""", files=(("<store>/clusters.json", "The named clusters."),), doc="clusters.md"),
    "klog users": Entry(
        examples="""echo 'alice-secret' | klog users add alice
klog users list""", files=STORE_FILES, see_also=("klog-serve", "klog-acls"), doc="security.md"),
    "klog users add": Entry(
        examples="""echo 'alice-secret' | klog users add alice                      # SCRAM-SHA-256
echo 'admin-secret' | klog users add admin --mechanism SCRAM-SHA-512""",
        files=STORE_FILES, doc="security.md"),
    "klog users list": Entry(examples="klog users list --json", files=STORE_FILES, doc="security.md"),
    "klog users delete": Entry(
        examples="""echo 'alice-secret' | klog users add alice
klog users delete alice""", files=STORE_FILES, doc="security.md"),
    "klog acls": Entry(
        examples="""klog acls add --allow-principal User:alice --operation Read --topic orders
klog acls list""", files=STORE_FILES, see_also=("klog-serve", "klog-users"), doc="security.md"),
    "klog acls add": Entry(
        examples="""klog acls add --allow-principal User:alice --producer --consumer --topic orders- \\
    --resource-pattern-type prefixed --group billing
klog acls add --allow-principal User:alice --operation Read --group billing""",
        files=STORE_FILES, doc="security.md"),
    "klog acls list": Entry(examples="klog acls list --topic orders", files=STORE_FILES, doc="security.md"),
    "klog acls remove": Entry(
        examples="""klog acls add --allow-principal User:alice --operation Read --group billing
klog acls remove --group billing --principal User:alice""", files=STORE_FILES, doc="security.md"),
    "klog acls settings": Entry(
        examples="""klog acls settings --super-user User:admin
klog acls settings --allow-everyone-if-no-acl-found false""", files=STORE_FILES, doc="security.md"),
    "klog quotas": Entry(
        examples="""klog quotas set --user alice producer_byte_rate=1048576
klog quotas list""", files=STORE_FILES, see_also=("klog-serve",), doc="security.md"),
    "klog quotas set": Entry(
        examples="""klog quotas set --user alice producer_byte_rate=1048576 consumer_byte_rate=4194304
klog quotas set --client-default request_percentage=50""", files=STORE_FILES, doc="security.md"),
    "klog quotas list": Entry(examples="klog quotas list --json", files=STORE_FILES, doc="security.md"),
    "klog quotas remove": Entry(
        examples="""klog quotas set --user alice producer_byte_rate=1048576
klog quotas remove --user alice producer_byte_rate""", files=STORE_FILES, doc="security.md"),
    "klog spark": Entry(examples="""klog spark sql "SELECT count(*) FROM orders\"""", **SPARK),
    "klog spark export": Entry(
        examples="""klog spark export orders --to parquet --out orders-parquet
klog spark export access --to csv --out last-hour --since 1h -p 0
klog spark export access --to parquet --out access --value-format json --partition-by date""", **SPARK),
    "klog spark sql": Entry(
        examples="""klog spark sql "SELECT status, count(*) AS n FROM access GROUP BY status ORDER BY n DESC"
klog spark sql "SELECT o.id, c.city FROM orders o JOIN customers c ON o._key = c.cid" --to-topic enriched""",
        **SPARK),
    "klog spark run": Entry(examples="klog spark run samples/spark_job.py quickstart-access path-stats", **SPARK),
    "klog spark stream": Entry(
        examples="""klog spark stream --from access --to errors --available-now \\
    --sql "SELECT key, value FROM source WHERE get_json_object(value, '$.status') >= 500\"""", **SPARK),
}
