// An env server written to AgentEnv's env protocol (agentenv_protocol/types.py, protocol 1.0),
// not to agentenv's code: the EnvironmentCard at /.well-known/agent-env.json, MCP tools at /mcp
// (streamable HTTP, the official TypeScript SDK, stateless), and the JSON-RPC 2.0 data plane at
// the card's url, /agentenv: data/reset, data/add (text, file with inline bytes, a file:// URI
// or an http(s) URL, data parts) and data/get.
//
// Environment: ENVIRONMENT_NAME (the card's name, default "harbor"), MCP_HOST (0.0.0.0),
// MCP_PORT (18765), BREAK_CARD=1 serves a card without its name (for the validator's tests).
import http from 'node:http';
import fs from 'node:fs/promises';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const NAME = process.env.ENVIRONMENT_NAME || 'harbor';
const HOST = process.env.MCP_HOST || '0.0.0.0';
const PORT = Number(process.env.MCP_PORT || 18765);
const RPC_PATH = '/agentenv';
const WELL_KNOWN_PATH = '/.well-known/agent-env.json';
const MCP_PATH = '/mcp';

// The env's state: the parts data/add was given, files with their content inline.
let parts = [];

const tools = [
  {
    name: 'count_parts',
    description: 'Count the loaded parts by kind.',
    inputSchema: { type: 'object', properties: {} },
    call: () => {
      const counts = { text: 0, file: 0, data: 0 };
      for (const p of parts) counts[p.kind]++;
      return counts;
    },
  },
  {
    name: 'read_file',
    description: 'Return the text of a loaded file by name.',
    inputSchema: { type: 'object', properties: { name: { type: 'string', description: 'The file name.' } }, required: ['name'] },
    call: ({ name }) => {
      const p = parts.find((p) => p.kind === 'file' && p.file.name === name);
      if (!p) throw new Error(`no file ${name}`);
      return { name, text: Buffer.from(p.file.bytes, 'base64').toString('utf8') };
    },
  },
];

function card() {
  const c = {
    name: NAME,
    protocolVersion: '1.0',
    url: RPC_PATH,
    preferredTransport: 'JSONRPC',
    additionalInterfaces: [{ url: MCP_PATH, transport: 'mcp' }],
    capabilities: {
      extensions: [{
        uri: 'urn:agentenv:intake/v1',
        description: 'Declares what the v1 data plane accepts on data/add and returns on data/get.',
        params: { add: [{ part: 'file', format: 'text', mimeTypes: ['text/plain'], load: 'additive' }, { part: 'data', format: 'json', load: 'additive' }, { part: 'text', format: 'text', load: 'additive' }] },
        required: null,
      }],
      tools: tools.map(({ name, description, inputSchema }) => ({ name, description, inputSchema })),
      operations: ['data/reset', 'data/add', 'data/get'],
    },
    children_environments: null,
  };
  if (process.env.BREAK_CARD === '1') delete c.name;
  return c;
}

function mcpServer() {
  const s = new Server({ name: NAME, version: '1.0.0' }, { capabilities: { tools: {} } });
  s.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: tools.map(({ name, description, inputSchema }) => ({ name, description, inputSchema })),
  }));
  s.setRequestHandler(CallToolRequestSchema, async (req) => {
    const t = tools.find((t) => t.name === req.params.name);
    if (!t) return { isError: true, content: [{ type: 'text', text: `unknown tool ${req.params.name}` }] };
    try {
      const out = t.call(req.params.arguments || {});
      return { content: [{ type: 'text', text: JSON.stringify(out) }], structuredContent: out };
    } catch (e) {
      return { isError: true, content: [{ type: 'text', text: String(e.message || e) }] };
    }
  });
  return s;
}

class InvalidParams extends Error {}
class OperationError extends Error {
  constructor(code, message) { super(message); this.code = code; }
}

// resolveFile turns a file part's file into inline bytes, as types.py's FileWithBytes.
async function resolveFile(file) {
  if (typeof file.bytes === 'string') return { bytes: file.bytes, mimeType: file.mimeType ?? null, name: file.name ?? null };
  if (typeof file.uri !== 'string') throw new InvalidParams('file: bytes or uri is required');
  let buf;
  if (file.uri.startsWith('file://')) {
    buf = await fs.readFile(new URL(file.uri));
  } else if (/^https?:\/\//.test(file.uri)) {
    const res = await fetch(file.uri, { signal: AbortSignal.timeout(30000) });
    if (!res.ok) throw new OperationError('add_failed', `GET ${file.uri.split('?')[0]}: ${res.status}`);
    buf = Buffer.from(await res.arrayBuffer());
  } else {
    throw new InvalidParams(`file: unsupported uri ${file.uri}`);
  }
  return { bytes: buf.toString('base64'), mimeType: file.mimeType ?? null, name: file.name ?? null };
}

function checkPart(p, i) {
  if (!p || typeof p !== 'object') throw new InvalidParams(`parts[${i}]: not an object`);
  switch (p.kind) {
    case 'text': if (typeof p.text !== 'string') throw new InvalidParams(`parts[${i}].text: required`); return;
    case 'file': if (!p.file || typeof p.file !== 'object') throw new InvalidParams(`parts[${i}].file: required`); return;
    case 'data': if (!p.data || typeof p.data !== 'object' || Array.isArray(p.data)) throw new InvalidParams(`parts[${i}].data: an object is required`); return;
    default: throw new InvalidParams(`parts[${i}].kind: ${JSON.stringify(p.kind)} is not text, file or data`);
  }
}

const methods = {
  'data/reset': async () => { parts = []; return {}; },
  'data/add': async (params) => {
    if (!params || !Array.isArray(params.parts) || params.parts.length < 1) throw new InvalidParams('parts: at least one part is required');
    params.parts.forEach(checkPart);
    const loaded = [];
    try {
      for (const p of params.parts) {
        loaded.push(p.kind === 'file' ? { kind: 'file', file: await resolveFile(p.file), metadata: p.metadata ?? null } : { ...p, metadata: p.metadata ?? null });
      }
    } catch (e) {
      if (e instanceof InvalidParams || e instanceof OperationError) throw e;
      throw new OperationError('add_failed', String(e.message || e));
    }
    parts.push(...loaded);
    return {};
  },
  'data/get': async () => ({ parts }),
};

function rpcError(id, code, message, data) {
  const error = { code, message };
  if (data !== undefined) error.data = data;
  return { jsonrpc: '2.0', id: id ?? null, error };
}

async function dataPlane(body) {
  let req;
  try { req = body.length ? JSON.parse(body) : null; } catch { return rpcError(null, -32700, 'parse error'); }
  if (!req || typeof req !== 'object' || Array.isArray(req) || req.jsonrpc !== '2.0' || !('method' in req)) {
    return rpcError(req && typeof req === 'object' ? req.id : null, -32600, 'invalid request');
  }
  const fn = methods[req.method];
  if (!fn) return rpcError(req.id, -32601, `method not found: ${req.method}`);
  try {
    return { jsonrpc: '2.0', id: req.id ?? null, result: await fn(req.params || {}) };
  } catch (e) {
    if (e instanceof InvalidParams) return rpcError(req.id, -32602, 'invalid_request', { detail: e.message });
    if (e instanceof OperationError) return rpcError(req.id, -32000, e.message, { code: e.code });
    const code = { 'data/reset': 'reset_failed', 'data/add': 'add_failed', 'data/get': 'get_failed' }[req.method];
    return rpcError(req.id, -32000, String(e.message || e), { code });
  }
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let n = 0;
    req.on('data', (c) => { n += c.length; if (n > 64 << 20) { reject(new Error('body too large')); req.destroy(); } else chunks.push(c); });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function json(res, status, v) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(v));
}

const server = http.createServer(async (req, res) => {
  const path = new URL(req.url, 'http://x').pathname;
  try {
    if (path === WELL_KNOWN_PATH && req.method === 'GET') return json(res, 200, card());
    if (path === RPC_PATH && req.method === 'POST') return json(res, 200, await dataPlane(await readBody(req)));
    if (path === MCP_PATH) {
      if (req.method !== 'POST') return json(res, 405, rpcError(null, -32000, 'method not allowed'));
      const body = JSON.parse(await readBody(req));
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      const s = mcpServer();
      res.on('close', () => { transport.close(); s.close(); });
      await s.connect(transport);
      return await transport.handleRequest(req, res, body);
    }
    json(res, 404, { ok: false, error: { code: 'not_found', message: path } });
  } catch (e) {
    if (!res.headersSent) json(res, 500, { ok: false, error: { code: 'internal', message: String(e.message || e) } });
  }
});
server.listen(PORT, HOST, () => console.log(`${NAME} serving on ${HOST}:${PORT}`));
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
