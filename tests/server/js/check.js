// kafkajs 2.2.4 against `klog serve`: `node check.js SCENARIO BOOTSTRAP [OPTIONS-JSON]` runs one
// scenario and prints what a user of kafkajs sees as JSON lines ({"step": ...}), the last one
// {"step": "done"}. tests/server/test_serve_kafkajs.py asserts on them. Every scenario is bounded:
// kafkajs retries (some things forever) by default, so retries are few and a global timer exits 3.
'use strict'

const {
  Kafka, logLevel, CompressionTypes, ConfigResourceTypes,
  AclResourceTypes, AclOperationTypes, AclPermissionTypes, ResourcePatternTypes,
} = require('kafkajs')

const [scenario, bootstrap, optionsJson] = process.argv.slice(2)
const options = JSON.parse(optionsJson || '{}')
const LIMIT_MS = options.limitMs || 30000

const timer = setTimeout(() => {
  emit('timeout', { scenario, limitMs: LIMIT_MS })
  process.exit(3)
}, LIMIT_MS)

const started = Date.now()

function emit (step, fields = {}) {
  process.stdout.write(JSON.stringify({ step, ...fields, ms: Date.now() - started }) + '\n')
}

function kafka (extra = {}) {
  return new Kafka({
    clientId: 'kafkajs-check',
    brokers: [bootstrap],
    logLevel: options.log ? logLevel.INFO : logLevel.NOTHING,
    connectionTimeout: 3000,
    requestTimeout: 10000,
    retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
    ...(options.sasl ? { sasl: options.sasl } : {}),
    ...extra,
  })
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// a consumer that crashes for good (kafkajs stops it: e.g. an error thrown in eachBatch) fails
// the scenario at the next wait instead of leaving it to the global timer
let crashed = null

function watch (consumer) {
  consumer.on(consumer.events.CRASH, e => { if (!e.payload.restart) crashed = e.payload.error })
  return consumer
}

async function until (what, predicate, ms = 15000) {
  const deadline = Date.now() + ms
  while (!(await predicate())) {
    if (crashed) throw crashed
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

function shown (message) {
  const headers = {}
  for (const [name, value] of Object.entries(message.headers || {})) {
    headers[name] = Array.isArray(value) ? value.map(String) : String(value)
  }
  return {
    offset: Number(message.offset),
    key: message.key === null ? null : message.key.toString(),
    value: message.value === null ? null : message.value.toString(),
    headers,
  }
}

function errorShown (e) {
  const shown = { name: e.name, type: e.type || null, message: e.message, retriable: Boolean(e.retriable) }
  if (e.errors) shown.errors = e.errors.map(x => ({ type: x.type || x.name, message: x.message }))
  if (e.partitions) shown.partitions = e.partitions.map(p => ({ partition: p.partition, ...(p.error ? { type: p.error.type || p.error.name } : {}) }))
  if (e.cause && e.cause !== e) shown.cause = errorShown(e.cause) // what kafkajs's retry wrapped
  return shown
}

// Reads `count` records of `topic` (every partition, from the beginning) with a consumer of its own
// group; [{partition, offset, key, value, headers}] in arrival order.
async function readAll (client, topic, count, consumerOptions = {}) {
  const consumer = watch(client.consumer({ groupId: `read-${topic}-${Date.now()}`, maxWaitTimeInMs: 100, ...consumerOptions }))
  const seen = []
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => { seen.push({ partition, ...shown(message) }) },
    })
    await until(`${count} records of ${topic}`, () => seen.length >= count)
    await sleep(options.settleMs || 300) // anything past `count` would show up here
  } finally {
    await consumer.disconnect()
  }
  return seen
}

const scenarios = {
  // keys, headers (one repeated) and gzip; produce answers and what a consumer reads back
  async roundtrip () {
    const client = kafka()
    const producer = client.producer({ allowAutoTopicCreation: false })
    await producer.connect()
    const messages = []
    for (let i = 0; i < 5; i++) {
      messages.push({ key: `k${i}`, value: `v${i}`, partition: 0, headers: { trace: `t${i}`, multi: ['a', 'b'] } })
    }
    messages.push({ key: null, value: 'no-key', partition: 0 })
    const answer = await producer.send({ topic: options.topic, compression: CompressionTypes.GZIP, messages })
    emit('produced', { answer: answer.map(a => ({ partition: a.partition, errorCode: a.errorCode, baseOffset: a.baseOffset })) })
    const second = await producer.send({ topic: options.topic, messages: [{ key: 'plain', value: 'uncompressed', partition: 0 }] })
    emit('produced', { answer: second.map(a => ({ partition: a.partition, errorCode: a.errorCode, baseOffset: a.baseOffset })) })
    await producer.disconnect()
    emit('consumed', { records: await readAll(client, options.topic, 7) })
  },

  // idempotent producer: sends in flight at once on several partitions; offsets dense, nothing twice
  async idempotent () {
    const client = kafka()
    const producer = client.producer({ idempotent: true, maxInFlightRequests: 1 })
    await producer.connect()
    const sends = []
    for (let i = 0; i < 10; i++) {
      sends.push(producer.send({ topic: options.topic, acks: -1, messages: [{ key: `k${i}`, value: `v${i}`, partition: i % 2 }] }))
    }
    const answers = (await Promise.all(sends)).flat()
    emit('produced', { answers: answers.map(a => ({ partition: a.partition, errorCode: a.errorCode, baseOffset: Number(a.baseOffset) })) })
    const batch = await producer.sendBatch({
      acks: -1,
      topicMessages: [{ topic: options.topic, messages: [{ value: 'b0', partition: 0 }, { value: 'b1', partition: 1 }] }],
    })
    emit('batch', { answers: batch.map(a => ({ partition: a.partition, baseOffset: Number(a.baseOffset) })) })
    await producer.disconnect()
    emit('consumed', { records: await readAll(client, options.topic, 12) })
  },

  // two members of one group share the partitions; one leaves; the other takes over and finishes
  async group () {
    const { topic, groupId } = options
    const client = kafka()
    const producer = client.producer()
    await producer.connect()
    const produceRound = async (round, n) => {
      const messages = []
      for (let i = 0; i < n; i++) messages.push({ key: `r${round}-${i}`, value: `r${round}-${i}`, partition: i % 4 })
      await producer.send({ topic, messages })
    }
    const seen = { a: [], b: [] }
    const assigned = { a: [], b: [] }
    const member = async name => {
      const consumer = watch(client.consumer({ groupId, sessionTimeout: 6000, heartbeatInterval: 300, rebalanceTimeout: 5000, maxWaitTimeInMs: 100 }))
      consumer.on(consumer.events.GROUP_JOIN, e => {
        assigned[name] = (e.payload.memberAssignment[topic] || []).slice().sort()
        emit('joined', { phase, member: name, partitions: assigned[name], leader: e.payload.isLeader })
      })
      await consumer.connect()
      await consumer.subscribe({ topics: [topic], fromBeginning: true })
      await consumer.run({
        autoCommitInterval: 100,
        eachMessage: async ({ partition, message }) => { seen[name].push({ partition, ...shown(message) }) },
      })
      return consumer
    }
    const admin = client.admin()
    await admin.connect()
    await admin.createTopics({ topics: [{ topic, numPartitions: 4 }], waitForLeaders: true })
    // each round's records committed before the membership changes: a record read twice is then a bug
    const committedTotal = async () => (await admin.fetchOffsets({ groupId, topics: [topic] }))[0].partitions
      .reduce((sum, p) => sum + Math.max(0, Number(p.offset)), 0)
    await produceRound(1, 20)
    let phase = 'alone' // joins are told apart by what the group was going through
    const a = await member('a')
    await until('a owns all 4 partitions', () => assigned.a.length === 4)
    await until('round 1 committed', async () => (await committedTotal()) === 20)
    phase = 'b joined'
    const b = await member('b')
    await until('the partitions split between a and b', () => assigned.a.length === 2 && assigned.b.length === 2)
    await produceRound(2, 20)
    await until('round 2 committed', async () => (await committedTotal()) === 40)
    phase = 'b left'
    await b.disconnect() // LeaveGroup: a is given b's partitions
    emit('left', { member: 'b' })
    await until('a owns all 4 partitions again', () => assigned.a.length === 4)
    await produceRound(3, 20)
    await until('round 3 read', () => seen.a.length + seen.b.length >= 60)
    await sleep(500)
    await a.disconnect() // commits what it read
    await producer.disconnect()
    emit('consumed', { a: seen.a, b: seen.b })
    const committed = await admin.fetchOffsets({ groupId, topics: [topic] })
    emit('committed', { offsets: committed[0].partitions.map(p => ({ partition: p.partition, offset: Number(p.offset) })) })
    const described = await admin.describeGroups([groupId])
    emit('described', { groups: described.groups.map(g => ({ groupId: g.groupId, state: g.state, protocolType: g.protocolType, members: g.members.length, errorCode: g.errorCode })) })
    await admin.disconnect()
  },

  // the admin client's operations, each with what it answers
  async admin () {
    const { topic } = options
    const client = kafka()
    const admin = client.admin()
    await admin.connect()
    const created = await admin.createTopics({
      topics: [{ topic, numPartitions: 2, configEntries: [{ name: 'retention.ms', value: '3600000' }] }],
      waitForLeaders: true,
    })
    emit('createTopics', { created })
    try {
      await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], validateOnly: false })
      const again = await admin.createTopics({ topics: [{ topic, numPartitions: 2 }] })
      emit('createTopics again', { created: again })
    } catch (e) {
      emit('createTopics again', { error: errorShown(e) })
    }
    try {
      await admin.createTopics({ topics: [{ topic: `${topic}-placed`, replicaAssignment: [{ partition: 0, replicas: [0] }] }] })
      emit('createTopics with replicaAssignment', { error: null })
    } catch (e) {
      emit('createTopics with replicaAssignment', { error: errorShown(e) })
    }
    emit('listTopics', { topics: (await admin.listTopics()).filter(t => !t.startsWith('__')).sort() })
    const meta = await admin.fetchTopicMetadata({ topics: [topic] })
    emit('fetchTopicMetadata', {
      topics: meta.topics.map(t => ({ name: t.name, partitions: t.partitions.map(p => ({ partitionId: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr, partitionErrorCode: p.partitionErrorCode })).sort((x, y) => x.partitionId - y.partitionId) })),
    })
    const cluster = await admin.describeCluster()
    emit('describeCluster', { brokers: cluster.brokers.length, controller: cluster.controller, clusterId: typeof cluster.clusterId })
    await admin.createPartitions({ topicPartitions: [{ topic, count: 3 }] })
    const grown = await admin.fetchTopicMetadata({ topics: [topic] })
    emit('createPartitions', { partitions: grown.topics[0].partitions.length })
    try {
      await admin.createPartitions({ topicPartitions: [{ topic, count: 2 }] })
      emit('createPartitions fewer', { error: null })
    } catch (e) {
      emit('createPartitions fewer', { error: errorShown(e) })
    }
    const configs = await admin.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms', 'cleanup.policy'] }],
      includeSynonyms: false,
    })
    emit('describeConfigs', {
      resources: configs.resources.map(r => ({ errorCode: r.errorCode, name: r.resourceName, entries: Object.fromEntries(r.configEntries.map(c => [c.configName, c.configValue])) })),
    })
    await admin.alterConfigs({
      validateOnly: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'retention.ms', value: '7200000' }] }],
    })
    const altered = await admin.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms'] }],
      includeSynonyms: false,
    })
    emit('alterConfigs', { value: altered.resources[0].configEntries[0].configValue })
    const producer = client.producer()
    await producer.connect()
    await producer.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ value: `v${i}`, partition: 0 })) })
    await producer.disconnect()
    emit('fetchTopicOffsets', { offsets: (await admin.fetchTopicOffsets(topic)).map(o => ({ partition: o.partition, low: o.low, high: o.high })).sort((x, y) => x.partition - y.partition) })
    const at = async timestamp => (await admin.fetchTopicOffsetsByTimestamp(topic, timestamp)).sort((x, y) => x.partition - y.partition)
    emit('fetchTopicOffsetsByTimestamp', { past: await at(0), future: await at(Date.now() + 3600000) })
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '4' }] })
    emit('deleteRecords', { offsets: (await admin.fetchTopicOffsets(topic)).filter(o => o.partition === 0).map(o => ({ low: o.low, high: o.high })) })
    try {
      await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '99' }] })
      emit('deleteRecords past the end', { error: null })
    } catch (e) {
      emit('deleteRecords past the end', { error: errorShown(e) })
    }
    // a group's offsets: set while it is empty (kafkajs joins the group to do it and waits out one
    // 5 s fetch wait of its own), read back, listed, described, deleted
    const groupId = `${topic}-group`
    await admin.setOffsets({ groupId, topic, partitions: [{ partition: 0, offset: '3' }, { partition: 1, offset: '0' }] })
    emit('fetchOffsets', { offsets: (await admin.fetchOffsets({ groupId, topics: [topic] }))[0].partitions.map(p => ({ partition: p.partition, offset: p.offset })).sort((x, y) => x.partition - y.partition) })
    emit('listGroups', { groups: (await admin.listGroups()).groups.filter(g => g.groupId === groupId) })
    const groups = await admin.describeGroups([groupId])
    emit('describeGroups', { groups: groups.groups.map(g => ({ groupId: g.groupId, state: g.state, members: g.members.length, errorCode: g.errorCode })) })
    emit('deleteGroups', { result: await admin.deleteGroups([groupId]) })
    await admin.deleteTopics({ topics: [topic] })
    emit('deleteTopics', { topics: (await admin.listTopics()).filter(t => t === topic) })
    try {
      await admin.deleteTopics({ topics: [topic] })
      emit('deleteTopics again', { error: null })
    } catch (e) {
      emit('deleteTopics again', { error: errorShown(e) })
    }
    await admin.disconnect()
  },

  // ACLs (the caller a super user: once an ACL exists, the authorizer is on): created, described, deleted
  async acls () {
    const { topic } = options
    const admin = kafka().admin()
    await admin.connect()
    const acl = {
      resourceType: AclResourceTypes.TOPIC, resourceName: topic, resourcePatternType: ResourcePatternTypes.LITERAL,
      principal: 'User:alice', host: '*', operation: AclOperationTypes.READ, permissionType: AclPermissionTypes.ALLOW,
    }
    await admin.createAcls({ acl: [acl] })
    const filter = { ...acl, principal: undefined, host: undefined, operation: AclOperationTypes.ANY, permissionType: AclPermissionTypes.ANY }
    const described = await admin.describeAcls(filter)
    emit('describeAcls', { errorCode: described.errorCode, resources: described.resources })
    const deleted = await admin.deleteAcls({ filters: [filter] })
    emit('deleteAcls', { results: deleted.filterResponses.map(f => ({ errorCode: f.errorCode, matching: f.matchingAcls.length })) })
    emit('describeAcls after', { resources: (await admin.describeAcls(filter)).resources })
    await admin.disconnect()
  },

  // one transaction committed, one aborted, one committed: read_committed sees only the committed
  async transactions () {
    const { topic } = options
    const client = kafka()
    const producer = client.producer({ transactionalId: `${topic}-txn`, idempotent: true, maxInFlightRequests: 1 })
    await producer.connect()
    const run = async (label, count, finish) => {
      const txn = await producer.transaction()
      for (let i = 0; i < count; i++) {
        await txn.send({ topic, messages: [{ key: `${label}${i}`, value: `${label}${i}`, partition: i % 2 }] })
      }
      await txn[finish]()
      emit(finish === 'commit' ? 'committed' : 'aborted', { label })
    }
    await run('c', 3, 'commit')
    await run('a', 4, 'abort')
    await run('d', 2, 'commit')
    const committed = await readAll(client, topic, 5)
    emit('read_committed', { records: committed.map(r => ({ partition: r.partition, value: r.value })) })
    const all = await readAll(client, topic, 9, { readUncommitted: true })
    emit('read_uncommitted', { records: all.map(r => ({ partition: r.partition, value: r.value })) })
    // a transaction left open, then a record outside it: read_committed stops at the open one's first
    // record (the last stable offset), as do the offsets kafkajs's admin gives
    const open = await producer.transaction()
    await open.send({ topic, messages: [{ value: 'open', partition: 0 }] })
    const plain = client.producer()
    await plain.connect()
    await plain.send({ topic, messages: [{ value: 'after-open', partition: 0 }] })
    const admin = client.admin()
    await admin.connect()
    const highs = async () => (await admin.fetchTopicOffsets(topic)).map(o => ({ partition: o.partition, high: Number(o.high) })).sort((x, y) => x.partition - y.partition)
    emit('offsets while open', { offsets: await highs() })
    emit('read_committed while open', { values: (await readAll(client, topic, 5)).map(r => r.value) })
    await open.commit()
    emit('offsets after commit', { offsets: await highs() })
    emit('read_committed after commit', { values: (await readAll(client, topic, 7)).filter(r => r.partition === 0).map(r => r.value) })
    await admin.disconnect()
    await plain.disconnect()
    await producer.disconnect()
  },

  // consume-transform-produce: each input batch's output and its group offsets in one transaction,
  // committed, or aborted (options.abortFrom: batches ending at that offset or later), which must
  // leave both the offsets and the output as they were. Reads options.count input records, then
  // (options.outputCount) the output.
  async transform () {
    const { input, output, groupId } = options
    const client = kafka()
    if (options.seed) { // the input: values w<first>..., alternately on partitions 0 and 1
      const seeder = client.producer()
      await seeder.connect()
      const first = options.first || 0
      await seeder.send({ topic: input, messages: Array.from({ length: options.seed }, (_, i) => ({ value: `w${first + i}`, partition: i % 2 })) })
      await seeder.disconnect()
    }
    const producer = client.producer({ transactionalId: `${groupId}-txn`, idempotent: true, maxInFlightRequests: 1 })
    await producer.connect()
    const consumer = watch(client.consumer({ groupId, maxWaitTimeInMs: 100, sessionTimeout: 6000, heartbeatInterval: 300 }))
    await consumer.connect()
    await consumer.subscribe({ topics: [input], fromBeginning: true })
    let transformed = 0
    let aborted = 0
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset }) => {
        const last = batch.messages[batch.messages.length - 1]
        const txn = await producer.transaction()
        await txn.send({ topic: output, messages: batch.messages.map(m => ({ value: m.value.toString().toUpperCase() })) })
        await txn.sendOffsets({
          consumerGroupId: groupId,
          topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: String(Number(last.offset) + 1) }] }],
        })
        if (options.abortFrom !== undefined && Number(last.offset) >= options.abortFrom) {
          await txn.abort()
          aborted += batch.messages.length
          emit('aborted', { partition: batch.partition, upTo: Number(last.offset) })
        } else {
          await txn.commit()
          transformed += batch.messages.length
          emit('committed', { partition: batch.partition, upTo: Number(last.offset) })
        }
        for (const m of batch.messages) resolveOffset(m.offset)
      },
    })
    await until('every input record transformed', () => transformed + aborted >= options.count)
    await consumer.disconnect()
    await producer.disconnect()
    const admin = client.admin()
    await admin.connect()
    const committed = await admin.fetchOffsets({ groupId, topics: [input] })
    emit('committed offsets', { offsets: committed[0].partitions.map(p => ({ partition: p.partition, offset: Number(p.offset) })) })
    await admin.disconnect()
    if (options.outputCount !== undefined) {
      const out = await readAll(client, output, options.outputCount)
      emit('output', { values: out.map(r => r.value) })
    }
  },

  // a second producer with the same transactionalId fences the first
  async fencing () {
    const { topic } = options
    const client = kafka({ retry: { retries: 1, initialRetryTime: 100, maxRetryTime: 500 } })
    const transactionalId = `${topic}-fenced`
    const first = client.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
    await first.connect()
    const txn1 = await first.transaction()
    await txn1.send({ topic, messages: [{ value: 'from-first', partition: 0 }] })
    emit('first sent')
    const second = client.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
    await second.connect()
    // kafkajs sends the transactional InitProducerId at a producer's first transaction(): it bumps
    // the epoch and aborts the first's open transaction
    const txn2 = await second.transaction()
    emit('second began')
    for (const [what, action] of [['send', () => txn1.send({ topic, messages: [{ value: 'late', partition: 0 }] })], ['commit', () => txn1.commit()]]) {
      try {
        await action()
        emit(`first ${what}`, { error: null })
      } catch (e) {
        emit(`first ${what}`, { error: errorShown(e) })
      }
    }
    await txn2.send({ topic, messages: [{ value: 'from-second', partition: 0 }] })
    await txn2.commit()
    emit('second committed')
    await first.disconnect().catch(() => {})
    await second.disconnect()
    emit('read_committed', { values: (await readAll(client, topic, 1)).map(r => r.value) })
  },

  // SASL (options.sasl): produce and consume; with a wrong password, the error kafkajs gives
  async sasl () {
    const { topic } = options
    const client = kafka()
    const producer = client.producer()
    try {
      await producer.connect()
    } catch (e) {
      emit('connect', { error: errorShown(e) })
      return
    }
    const answer = await producer.send({ topic, messages: [{ key: 'who', value: options.sasl.username, partition: 0 }] })
    emit('produced', { baseOffset: Number(answer[0].baseOffset) })
    await producer.disconnect()
    emit('consumed', { values: (await readAll(client, topic, options.count)).map(r => r.value) })
  },

  // a transaction left open past its timeout: the coordinator aborts it and bumps the epoch
  async expiry () {
    const { topic } = options
    const client = kafka()
    const producer = client.producer({ transactionalId: `${topic}-slow`, transactionTimeout: 1000, idempotent: true, maxInFlightRequests: 1 })
    await producer.connect()
    const txn = await producer.transaction()
    await txn.send({ topic, messages: [{ value: 'too-slow', partition: 0 }] })
    await sleep(options.waitMs)
    for (const [what, action] of [['send', () => txn.send({ topic, messages: [{ value: 'later', partition: 0 }] })], ['commit', () => txn.commit()]]) {
      try {
        await action()
        emit(what, { error: null })
      } catch (e) {
        emit(what, { error: errorShown(e) })
      }
    }
    await producer.disconnect()
    const admin = client.admin()
    await admin.connect()
    emit('offsets', { offsets: (await admin.fetchTopicOffsets(topic)).map(o => ({ partition: o.partition, high: o.high })) })
    await admin.disconnect()
  },
}

async function main () {
  if (!scenarios[scenario]) throw new Error(`unknown scenario ${scenario}`)
  await scenarios[scenario]()
  emit('done')
}

main().then(
  () => { clearTimeout(timer); process.exit(0) },
  e => { emit('failed', { error: errorShown(e), stack: e.stack }); process.exit(1) },
)
