'use strict';
// Send one message with the real ali-ons producer and print the send result as JSON.
//
// Usage: node send.js <namesrvAddr> <topic[,topic...]> <body> <producerGroup> [tags] [timeoutMs]
// Prints one JSON line per send on stdout: {"ok":true,"sendStatus":...,"msgId":...,
// "messageQueue":...}, or {"ok":false,"error":...}; exit code 0 when every send got SEND_OK,
// 1 otherwise. With several topics (RocketMQ topic names hold no comma) the same producer
// sends one message to each, every one after the first once a line arrives on stdin (the
// caller's cue, e.g. after restarting the name server). ali-ons' own log lines go to stderr
// so that stdout stays machine-readable.
//
// The constructor is set up so that ali-ons never reaches a cloud endpoint: `nameSrv` is
// given (so `onsAddr` is never fetched over HTTP), `httpclient` is a stub that fails if it
// is used anyway, and `clientIP` is fixed (no interface lookup). accessKeyId/Secret are dummy
// values: with them ali-ons signs requests (AccessKey/Signature/OnsChannel extFields), as in
// the golden recording; the name server must ignore these fields.

const { format } = require('util');
const { Producer, Message } = require('ali-ons');

const [ namesrv, topic, body, group, tags = 'TagNode', timeoutArg = '20000' ] = process.argv.slice(2);
if (!namesrv || !topic || body === undefined || !group) {
  process.stderr.write('usage: node send.js <namesrvAddr> <topic> <body> <producerGroup> [tags] [timeoutMs]\n');
  process.exit(2);
}
const hardTimeoutMs = Number(timeoutArg);

let finished = false;
function finish(result, code) {
  if (finished) return;
  finished = true;
  process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(code));
}

// Hard timeout: ali-ons retries and reconnects on its own; never let it run forever.
setTimeout(() => finish({ ok: false, error: `hard timeout after ${hardTimeoutMs} ms` }, 1), hardTimeoutMs);

const log = level => (...args) => process.stderr.write(`[ali-ons ${level}] ${format(...args)}\n`);
const stderrLogger = { info: log('info'), warn: log('warn'), error: log('error'), debug() {} };

const httpclientStub = {
  async request(url) {
    throw new Error(`httpclient stub: no HTTP allowed in tests (asked for ${url})`);
  },
};

// The next line on stdin (the caller's cue to send the next message).
const readline = require('readline');
const stdinLines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

function describe(result) {
  return {
    ok: result.sendStatus === 'SEND_OK',
    sendStatus: result.sendStatus,
    msgId: result.msgId,
    queueOffset: result.queueOffset,
    messageQueue: {
      topic: result.messageQueue.topic,
      brokerName: result.messageQueue.brokerName,
      queueId: Number(result.messageQueue.queueId),
    },
  };
}

async function main() {
  const producer = new Producer({
    nameSrv: namesrv,
    accessKeyId: 'peer-test-ak',
    accessKeySecret: 'peer-test-sk',
    producerGroup: group,
    clientIP: '127.0.0.1',
    httpclient: httpclientStub,
    logger: stderrLogger,
    sendMsgTimeout: 5000,
    retryTimesWhenSendFailed: 0,
  });
  producer.on('error', err => console.error('[producer error]', err));
  await producer.ready();
  const topics = topic.split(',');
  let last;
  try {
    for (const [index, name] of topics.entries()) {
      if (index) await stdinLines.next();
      const msg = new Message(name, tags, Buffer.from(body, 'utf8'));
      last = describe(await producer.send(msg));
      if (!last.ok) break;
      if (index < topics.length - 1) process.stdout.write(JSON.stringify(last) + '\n');
    }
  } finally {
    await producer.close().catch(err => console.error('[close error]', err));
  }
  return last;
}

main().then(
  result => finish(result, result.ok ? 0 : 1),
  err => finish({ ok: false, error: String(err && err.stack || err), code: err && err.code }, 1)
);
