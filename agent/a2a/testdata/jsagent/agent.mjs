// An A2A agent written with the official A2A JavaScript SDK (@a2a-js/sdk) and the official
// MCP TypeScript client (@modelcontextprotocol/sdk), for agentenv's integration tests. It
// takes the MCP gateway it is handed (urn:agentenv:mcp-config/v1, else the message metadata
// agentenv.mcp_servers), adds one note titled with the prompt's text through it, and answers
// with the tools it saw; handed a container's terminal (its tools include run_command), it
// runs the prompt's text as a shell command instead and answers with the command's output. PORT (default 8080) is where it listens; MCP_CONFIG=off leaves the
// extension off its card, so the gateway must come from the metadata; DELAY_MS makes it wait
// that long before it acts, for tests that interrupt a prompt.
import express from 'express';
import { randomUUID } from 'node:crypto';
import { DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const port = Number(process.env.PORT || 8080);
const withMCPConfig = process.env.MCP_CONFIG !== 'off';
const delayMS = Number(process.env.DELAY_MS || 0);
const servers = [];
const trajectories = new Map();

const extensions = [];
if (withMCPConfig) {
  extensions.push({ uri: 'urn:agentenv:mcp-config/v1', description: 'Register MCP servers the agent should use.',
    params: { endpoint: '/ext/mcp-config', methods: { add: { method: 'POST', request: { required: ['url'], optional: ['headers', 'name'] } } } } });
}
extensions.push({ uri: 'urn:agentenv:trajectory/v1', description: 'Retrieve an agent trajectory.',
  params: { endpoint: '/ext/trajectory', methods: { get: { method: 'POST', request: { required: ['task_id'] } } } } });

const card = {
  name: 'js note taker', description: 'Adds a note through the MCP gateway it is handed.',
  protocolVersion: '0.3.0', version: '1', url: `http://localhost:${port}/a2a`, preferredTransport: 'JSONRPC',
  capabilities: { extensions }, defaultInputModes: ['text'], defaultOutputModes: ['text'],
  skills: [{ id: 'notes', name: 'notes', description: 'adds a note', tags: ['mcp'] }],
};

class NoteTaker {
  async execute(ctx, bus) {
    const { taskId, contextId, userMessage } = ctx;
    const status = (state, text, final) => bus.publish({ kind: 'status-update', taskId, contextId, final,
      status: { state, timestamp: new Date().toISOString(),
        message: text && { kind: 'message', role: 'agent', messageId: randomUUID(), taskId, contextId, parts: [{ kind: 'text', text }] } } });
    if (!ctx.task) bus.publish({ kind: 'task', id: taskId, contextId, status: { state: 'submitted' }, history: [userMessage] });
    status('working', null, false);
    const lines = [];
    try {
      if (delayMS > 0) await new Promise((resolve) => setTimeout(resolve, delayMS));
      const text = userMessage.parts.filter((p) => p.kind === 'text').map((p) => p.text).join('\n');
      const meta = (userMessage.metadata || {})['agentenv.mcp_servers'] || [];
      const gw = servers.at(-1) || meta[0];
      if (!gw) throw new Error('no MCP server handed over');
      const client = new Client({ name: 'js-note-taker', version: '1' });
      await client.connect(new StreamableHTTPClientTransport(new URL(gw.url), { requestInit: { headers: gw.headers || {} } }));
      const { tools } = await client.listTools();
      let answer;
      if (tools.some((t) => t.name === 'run_command')) {
        // A container's terminal: run the prompt as a shell command, answer with its output.
        const args = { command: text };
        lines.push({ kind: 'tool_call', tool: 'run_command', arguments: args });
        const res = await client.callTool({ name: 'run_command', arguments: args });
        const out = (res.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
        lines.push({ kind: 'tool_result', tool: 'run_command', text: out, is_error: !!res.isError });
        await client.close();
        if (res.isError) throw new Error(`run_command failed: ${out}`);
        answer = out;
      } else {
        const args = { title: text, body: `via ${servers.length ? 'mcp-config' : 'metadata'}` };
        lines.push({ kind: 'tool_call', tool: 'add_note', arguments: args });
        const res = await client.callTool({ name: 'add_note', arguments: args });
        lines.push({ kind: 'tool_result', tool: 'add_note', text: JSON.stringify(res.structuredContent ?? res.content), is_error: !!res.isError });
        await client.close();
        if (res.isError) throw new Error(`add_note failed: ${JSON.stringify(res.content)}`);
        answer = `added "${text}" (${args.body}); tools: ${tools.map((t) => t.name).sort().join(',')}`;
      }
      trajectories.set(taskId, lines);
      bus.publish({ kind: 'artifact-update', taskId, contextId, artifact: { artifactId: randomUUID(),
        parts: [{ kind: 'text', text: answer }] } });
      status('completed', null, true);
    } catch (err) {
      trajectories.set(taskId, lines);
      status('failed', String(err && err.message || err), true);
    }
    bus.finished();
  }
  cancelTask = async () => {};
}

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new NoteTaker());
const app = express();
app.use(express.json());
app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
app.use('/a2a', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
if (withMCPConfig) {
  app.post('/ext/mcp-config', (req, res) => {
    if (!req.body || !req.body.url) return res.status(422).json({ error: 'url: required' });
    servers.push(req.body);
    res.json({ ok: true });
  });
}
app.post('/ext/trajectory', (req, res) => {
  const lines = trajectories.get(req.body && req.body.task_id);
  if (!lines) return res.status(404).json({ error: 'unknown task' });
  res.json({ trajectory: lines });
});
app.listen(port, '0.0.0.0', () => console.log(`js note taker on :${port}`));
