'use strict';
// Send one message with the real ali-ons producer and print the send result as JSON.
//
// Usage: node send.js <namesrvAddr> <topic> <body> <producerGroup> [tags] [timeoutMs]
// Prints one JSON line on stdout: {"ok":true,"sendStatus":...,"msgId":...,"messageQueue":...}
// or {"ok":false,"error":...}; exit code 0 on SEND_OK, 1 otherwise. ali-ons' own log lines
// go to stderr so that stdout stays machine-readable.
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
  let result;
  try {
    const msg = new Message(topic, tags, Buffer.from(body, 'utf8'));
    result = await producer.send(msg);
  } finally {
    await producer.close().catch(err => console.error('[close error]', err));
  }
  return result;
}

main().then(
  result => finish({
    ok: result.sendStatus === 'SEND_OK',
    sendStatus: result.sendStatus,
    msgId: result.msgId,
    queueOffset: result.queueOffset,
    messageQueue: {
      topic: result.messageQueue.topic,
      brokerName: result.messageQueue.brokerName,
      queueId: Number(result.messageQueue.queueId),
    },
  }, result.sendStatus === 'SEND_OK' ? 0 : 1),
  err => finish({ ok: false, error: String(err && err.stack || err), code: err && err.code }, 1)
);
