#!/usr/bin/env node
// Real-client check of the resumable upload of depot-fichiers (docs/SPECIFICATION.md §2.5) with
// tus-js-client, pinned in package.json, speaking the IETF draft (`protocol: 'ietf-draft-05'`,
// which sends `Upload-Draft-Interop-Version: 6`). Driven by tests/system/tus_client.rs.
//
// Sends FILE to ENDPOINT (`<url_base>/upload.php`) in parts of CHUNK bytes, the upload token in
// `Authorization: Bearer` on every request and the name in `Content-Disposition` on the creation,
// and prints the final answer's body (the publication JSON, with `url_telechargement`) on stdout.
// Exits 0 once that JSON is printed, 1 on any error (tus-js-client gave up, the final answer
// carries no `url_telechargement`), 2 past --timeout-seconds.
//
// Usage:
//   node upload.mjs --endpoint URL --token TOKEN --file PATH --name NAME --chunk-size BYTES
//     [--data-during-creation]     the creation carries the first part (`uploadDataDuringCreation`)
//     [--pause-after-first-chunk]  `abort()` once the first part is accepted, then `start()` again
//     [--stop-after-first-chunk]   exit (status 0, nothing on stdout) once the first part is
//                                  accepted: with --url-storage, a later run resumes the upload
//     [--url-storage FILE]         remember upload URLs in FILE (`FileUrlStorage`) and resume a
//                                  previous upload of the same file found there
//                                  (`findPreviousUploads`, `resumeFromPreviousUpload`)
//     [--no-keep-alive]            one TCP connection per request
//     [--retry-delays 0,200,500]   tus-js-client's `retryDelays` (default: its own)
//     [--recover-answer]           when the last response has no body (the final answer was lost
//                                  and a HEAD found the upload complete), ask the upload resource
//                                  for it again with GET
//     [--trace FILE]               one JSON line per event: exchange, retry, pause, resume…
//     [--timeout-seconds N]        default 300
//     [--input buffer|stream]      hand tus-js-client the file as a Buffer (the default) or as an
//                                  fs.ReadStream. tus-js-client 4.3.1's source for a ReadStream
//                                  marks a part as the last only when it holds the whole file:
//                                  in parts, it never sends `Upload-Complete: ?1`, and reports
//                                  success on the last part's `204` while the upload stays
//                                  incomplete (the draft: an offset equal to the length does not
//                                  complete an upload). Only tests/system/tus_client.rs uses `stream`,
//                                  to see that failure caught.

import { appendFileSync, createReadStream, readFileSync } from 'node:fs'
import http from 'node:http'
import { parseArgs } from 'node:util'

import tus from 'tus-js-client'

const { values: args } = parseArgs({
  options: {
    endpoint: { type: 'string' },
    token: { type: 'string' },
    file: { type: 'string' },
    name: { type: 'string' },
    'chunk-size': { type: 'string' },
    'data-during-creation': { type: 'boolean', default: false },
    'pause-after-first-chunk': { type: 'boolean', default: false },
    'stop-after-first-chunk': { type: 'boolean', default: false },
    'url-storage': { type: 'string' },
    'no-keep-alive': { type: 'boolean', default: false },
    'retry-delays': { type: 'string' },
    'recover-answer': { type: 'boolean', default: false },
    trace: { type: 'string' },
    'timeout-seconds': { type: 'string', default: '300' },
    input: { type: 'string', default: 'buffer' },
  },
  strict: true,
})
for (const required of ['endpoint', 'token', 'file', 'name', 'chunk-size']) {
  if (args[required] === undefined) fail(`--${required} is required`)
}
if (!['buffer', 'stream'].includes(args.input)) fail(`--input ${args.input}: buffer or stream`)

setTimeout(() => {
  console.error(`timed out after ${args['timeout-seconds']} s`)
  process.exit(2)
}, Number(args['timeout-seconds']) * 1000).unref()

function fail(message) {
  console.error(message)
  process.exit(1)
}

function trace(event) {
  if (args.trace) appendFileSync(args.trace, `${JSON.stringify(event)}\n`)
}

// `attachment; filename="…"`, with `filename*` (RFC 8187) for a name that is not plain ASCII:
// Node refuses a header value outside Latin-1, and the server reads `filename*` first.
function contentDisposition(name) {
  const quoted = name.replace(/[\\"]/g, '\\$&')
  if (/^[\x20-\x7e]*$/.test(name)) return `attachment; filename="${quoted}"`
  const ascii = quoted.replace(/[^\x20-\x7e]/g, '_')
  const encoded = encodeURIComponent(name).replace(
    /['()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  )
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encoded}`
}

const input = args.input === 'stream' ? createReadStream(args.file) : readFileSync(args.file)
const authorization = `Bearer ${args.token}`
let paused = false

const options = {
  endpoint: args.endpoint,
  protocol: 'ietf-draft-05',
  chunkSize: Number(args['chunk-size']),
  uploadDataDuringCreation: args['data-during-creation'],
  headers: { Authorization: authorization },
  httpStack: new tus.DefaultHttpStack({
    agent: new http.Agent({ keepAlive: !args['no-keep-alive'] }),
  }),
  onBeforeRequest(req) {
    // The name goes with the creation only.
    if (req.getMethod() === 'POST') {
      req.setHeader('Content-Disposition', contentDisposition(args.name))
    }
  },
  onAfterResponse(req, res) {
    trace({
      event: 'exchange',
      method: req.getMethod(),
      url: req.getURL(),
      request_offset: req.getHeader('Upload-Offset') ?? null,
      request_complete: req.getHeader('Upload-Complete') ?? null,
      status: res.getStatus(),
      location: res.getHeader('Location') ?? null,
      offset: res.getHeader('Upload-Offset') ?? null,
      complete: res.getHeader('Upload-Complete') ?? null,
    })
  },
  onShouldRetry(err, attempt) {
    const retry = tus.defaultOptions.onShouldRetry(err, attempt, options)
    trace({ event: 'retry', attempt, retry, error: err.message })
    return retry
  },
  onChunkComplete(size, accepted, total) {
    if (paused || accepted >= total) return
    paused = true
    if (args['stop-after-first-chunk']) {
      upload.abort()
      trace({ event: 'stop', offset: accepted })
      // The URL storage was written right after the creation, before the first part.
      process.exit(0)
    }
    if (args['pause-after-first-chunk']) {
      upload.abort()
      trace({ event: 'pause', offset: accepted })
      setTimeout(() => {
        trace({ event: 'resume' })
        upload.start()
      }, 200)
    }
  },
  onSuccess({ lastResponse }) {
    finish(lastResponse).catch((e) => fail(String(e)))
  },
  onError(err) {
    fail(`tus-js-client gave up: ${err.message}`)
  },
}
if (args['retry-delays'] !== undefined) {
  options.retryDelays = args['retry-delays'].split(',').map(Number)
}
if (args['url-storage'] !== undefined) {
  options.urlStorage = new tus.FileUrlStorage(args['url-storage'])
}

const upload = new tus.Upload(input, options)

async function finish(lastResponse) {
  let body = lastResponse.getBody()
  trace({ event: 'success', status: lastResponse.getStatus(), body_bytes: body.length })
  if (body === '' && args['recover-answer']) {
    // The final answer was lost and a HEAD found the upload complete: the resource gives its
    // answer again (docs/SPECIFICATION.md §2.5, « État »).
    const res = await fetch(upload.url, { headers: { Authorization: authorization } })
    body = await res.text()
    trace({ event: 'answer_recovered', status: res.status })
  }
  let answer
  try {
    answer = JSON.parse(body)
  } catch {
    fail(`final answer (status ${lastResponse.getStatus()}) is not JSON: ${JSON.stringify(body)}`)
  }
  if (typeof answer.url_telechargement !== 'string') {
    fail(`final answer has no url_telechargement: ${body}`)
  }
  process.stdout.write(`${body}\n`)
  process.exit(0)
}

if (args['url-storage'] !== undefined) {
  const previous = await upload.findPreviousUploads()
  if (previous.length > 0) {
    trace({ event: 'resume_from_storage', upload_url: previous[0].uploadUrl })
    upload.resumeFromPreviousUpload(previous[0])
  }
}
upload.start()
