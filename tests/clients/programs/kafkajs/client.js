// A KafkaJS client for isrsim's client tests (KafkaJS from npm, installed outside the clone; NODE_PATH).
//   node client.js metadata BOOTSTRAP TOPIC         prints "broker ID HOST:PORT" and "partition P leader L isr N"
//   node client.js produce BOOTSTRAP TOPIC N RATE   idempotent acks=all, keyed records with a header; prints
//                                                   "acked KEY" per acknowledgement and "produced A of N"
//   node client.js consume BOOTSTRAP TOPIC GROUP N  a group member; commits what it reads; stops after N
//                                                   distinct keys; prints "consumed KEY" and "consumed-total D"
"use strict";
const { Kafka, logLevel } = require("kafkajs");

const [mode, bootstrap, topic, a4, a5] = process.argv.slice(2);
const kafka = new Kafka({
  clientId: "isrsim-kafkajs",
  brokers: bootstrap.split(","),
  logLevel: logLevel.ERROR,
  retry: { retries: 30, initialRetryTime: 200, maxRetryTime: 2000 },
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function metadata() {
  const admin = kafka.admin();
  await admin.connect();
  const cluster = await admin.describeCluster();
  for (const b of cluster.brokers) console.log(`broker ${b.nodeId} ${b.host}:${b.port}`);
  const md = await admin.fetchTopicMetadata({ topics: [topic] });
  for (const p of md.topics[0].partitions) {
    console.log(`partition ${p.partitionId} leader ${p.leader} isr ${p.isr.length}`);
  }
  await admin.disconnect();
}

async function produce(n, rate) {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  let acked = 0;
  const gap = 1000 / rate;
  for (let i = 0; i < n; i++) {
    const key = `key-${String(i).padStart(6, "0")}`;
    try {
      await producer.send({
        topic,
        acks: -1,
        timeout: 10000,
        messages: [{ key, value: `value-${i}`, headers: { client: "kafkajs" } }],
      });
      acked++;
      console.log(`acked ${key}`);
    } catch (e) {
      console.error(`error ${key}: ${e.message}`);
    }
    await sleep(gap);
  }
  await producer.disconnect();
  console.log(`produced ${acked} of ${n}`);
}

async function consume(group, n) {
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const seen = new Set();
  let finish;
  const finished = new Promise((r) => (finish = r));
  const timer = setTimeout(finish, 120000);
  await consumer.run({
    autoCommitInterval: 200,
    eachMessage: async ({ message }) => {
      const header = message.headers.client && message.headers.client.toString();
      if (header !== "kafkajs") throw new Error(`record ${message.key} without its header`);
      const key = message.key.toString();
      if (!seen.has(key)) {
        seen.add(key);
        console.log(`consumed ${key}`);
      }
      if (seen.size >= n) finish();
    },
  });
  await finished;
  clearTimeout(timer);
  await consumer.disconnect(); // commits the offsets read
  console.log(`consumed-total ${seen.size}`);
}

const run = { metadata, produce: () => produce(+a4, +a5), consume: () => consume(a4, +a5) }[mode];
run().then(
  () => process.exit(0),
  (e) => {
    console.error(e.stack || String(e));
    process.exit(1);
  },
);
