// A kafkajs round trip against a Kafka listener, run by kafkajs_test.go:
// the admin client creates, lists and deletes topics, grows one
// (CreatePartitions), replaces a topic's configs (AlterConfigs) and reads
// them back (DescribeConfigs), an idempotent
// producer (acks -1) writes RECORDS keyed records, and a consumer in GROUP
// reads them back with commits. Every step prints one JSON line on stdout;
// kafkajs's own log goes to stderr.
//
// Environment: BROKERS (host:port,...), TOPIC, SCRATCH (a topic to create
// and delete), GROUP, RECORDS, PARTITIONS.
'use strict';

const { Kafka, logLevel, ConfigResourceTypes } = require('kafkajs');

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const brokers = env('BROKERS').split(',');
const topic = env('TOPIC');
const scratch = env('SCRATCH');
const group = env('GROUP');
const records = Number(env('RECORDS'));
const partitions = Number(env('PARTITIONS'));

const out = (step, value) => process.stdout.write(JSON.stringify({ step, ...value }) + '\n');

const kafka = new Kafka({
  clientId: 'sluice-kafkajs-test',
  brokers,
  logLevel: logLevel.WARN,
  logCreator: () => ({ level, log }) => {
    process.stderr.write(`kafkajs ${level}: ${JSON.stringify(log)}\n`);
  },
  retry: { retries: 10, initialRetryTime: 200 },
});

async function adminSteps() {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const created = await admin.createTopics({
      waitForLeaders: true,
      topics: [
        { topic, numPartitions: partitions, replicationFactor: 3 },
        { topic: scratch, numPartitions: 1, replicationFactor: 1 },
      ],
    });
    out('createTopics', { created });
    // A second create of an existing topic answers false (TOPIC_ALREADY_EXISTS).
    const again = await admin.createTopics({ topics: [{ topic: scratch, numPartitions: 1 }] });
    out('createTopicsAgain', { created: again });
    out('listTopics', { topics: (await admin.listTopics()).sort() });
    await admin.deleteTopics({ topics: [scratch], timeout: 20000 });
    out('deleteTopics', { topics: (await admin.listTopics()).sort() });

    // CreatePartitions: scratch again, grown from 1 to 3; a shrink fails.
    await admin.createTopics({ waitForLeaders: true, topics: [{ topic: scratch, numPartitions: 1, replicationFactor: 3 }] });
    await admin.createPartitions({ topicPartitions: [{ topic: scratch, count: 3 }] });
    const md = await admin.fetchTopicMetadata({ topics: [scratch] });
    let shrink = 'none';
    try {
      await admin.createPartitions({ topicPartitions: [{ topic: scratch, count: 2 }] });
    } catch (e) {
      shrink = e.type || String(e);
    }
    out('createPartitions', { partitions: md.topics[0].partitions.length, shrinkError: shrink });

    // AlterConfigs replaces the set: segment.ms, set at creation below, goes
    // back to its default.
    await admin.createTopics({
      topics: [{ topic: `${scratch}-configs`, numPartitions: 1, configEntries: [{ name: 'segment.ms', value: '3600000' }] }],
    });
    await admin.alterConfigs({
      resources: [{
        type: ConfigResourceTypes.TOPIC,
        name: `${scratch}-configs`,
        configEntries: [{ name: 'retention.ms', value: '7200000' }, { name: 'cleanup.policy', value: 'compact' }],
      }],
    });
    const described = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: `${scratch}-configs`, configNames: ['retention.ms', 'cleanup.policy', 'segment.ms'] }],
    });
    const configs = {};
    for (const c of described.resources[0].configEntries) {
      configs[c.configName] = { value: c.configValue, isDefault: c.isDefault };
    }
    out('alterConfigs', { configs });
  } finally {
    await admin.disconnect();
  }
}

async function produce() {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    const sent = [];
    // A few sends of several records each: each is one batch per partition.
    for (let i = 0; i < records; i += 10) {
      const messages = [];
      for (let j = i; j < Math.min(i + 10, records); j++) {
        messages.push({ key: `key-${j}`, value: `value-${j}`, headers: { n: String(j) } });
      }
      const res = await producer.send({ topic, acks: -1, messages });
      for (const r of res) {
        sent.push({ partition: r.partition, baseOffset: r.baseOffset, errorCode: r.errorCode });
      }
    }
    out('produce', { sent });
  } finally {
    await producer.disconnect();
  }
}

async function consume() {
  const consumer = kafka.consumer({ groupId: group, heartbeatInterval: 500, sessionTimeout: 10000 });
  await consumer.connect();
  const seen = [];
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  const timer = setTimeout(() => finish(new Error(`only ${seen.length} of ${records} records within 90 s`)), 90000);
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: true,
      eachMessage: async ({ partition, message }) => {
        seen.push({
          partition,
          offset: message.offset,
          key: message.key.toString(),
          value: message.value.toString(),
          n: message.headers.n.toString(),
        });
        if (seen.length >= records) finish(null);
      },
    });
    const err = await done;
    if (err) throw err;
    // commitOffsets of what eachMessage resolved happens at the batch's end;
    // disconnect waits for the run loop to finish and commit.
  } finally {
    clearTimeout(timer);
    await consumer.disconnect();
  }
  out('consume', { records: seen });
}

(async () => {
  await adminSteps();
  await produce();
  await consume();
  out('done', {});
})().catch((err) => {
  process.stderr.write(`kafkajs round trip failed: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
