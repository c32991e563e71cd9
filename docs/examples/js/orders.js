// A KafkaJS producer and group consumer for `isrsim run` (docs/your-application.md):
//   (cd docs/examples/js && npm install)
//   isrsim run --seed 7 --duration 90 -- node docs/examples/js/orders.js --count 3000 --pause 8
// It writes --count records to `orders-js` (idempotent, acks=all) in two halves with an idle pause of
// --pause seconds between them, then reads them all back in the group `orders-js-app`, committing after
// each batch it processed. Exits 1 when a send failed or a record was not read back.
const { Kafka, logLevel } = require('kafkajs');

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}

const count = arg('count', 3000);
const pause = arg('pause', 0);
const topic = 'orders-js';
const kafka = new Kafka({
  clientId: 'orders-js',
  brokers: process.env.KAFKA_BOOTSTRAP_SERVERS.split(','),
  logLevel: logLevel.WARN,
  retry: { retries: 30, initialRetryTime: 300, maxRetryTime: 3000 },
});

// Each send carries one key, so one partition. KafkaJS 2.2.4 (sendMessages.js) does not send again to a
// broker that already answered a send: when a send spans partitions on two brokers, one of them dies and its
// partition moves to the other, that partition's messages are dropped while the send resolves (measured
// here: 20 of 3,000 records acknowledged by no broker, the program told they were sent).
async function produce(producer, from, to) {
  for (let i = from; i < to; i += 50) {
    const messages = [];
    const key = `k${(i / 50) % 10}`;
    for (let j = i; j < Math.min(i + 50, to); j++) messages.push({ key, value: `order-${j}` });
    await producer.send({ topic, acks: -1, messages });
  }
}

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 3 }] });
  await admin.disconnect();

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const half = Math.floor(count / 2);
  await produce(producer, 0, half);
  if (pause > 0) {
    console.log(`pause from ${Date.now()}`);
    await new Promise((resolve) => setTimeout(resolve, pause * 1000));
    console.log(`pause until ${Date.now()}`);
  }
  await produce(producer, half, count);
  await producer.disconnect();
  console.log(`produced ${count}`);

  const consumer = kafka.consumer({ groupId: 'orders-js-app', sessionTimeout: 10000 });
  const seen = new Set();
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const done = new Promise((resolve) => {
    consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
        for (const m of batch.messages) {
          seen.add(m.value.toString());
          resolveOffset(m.offset);
        }
        await consumer.commitOffsets([
          { topic: batch.topic, partition: batch.partition, offset: String(Number(batch.lastOffset()) + 1) },
        ]);
        await heartbeat();
        if (seen.size >= count) resolve();
      },
    });
  });
  const timeout = new Promise((resolve) => setTimeout(resolve, 120000));
  await Promise.race([done, timeout]);
  await consumer.disconnect();
  console.log(`consumed ${seen.size} distinct of ${count}`);
  process.exit(seen.size >= count ? 0 : 1);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
