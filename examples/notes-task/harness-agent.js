// harness-agent.js: a small command-line agent for prompt_agent's harness kind. It reads the
// MCP config agentenv writes ($AGENTENV_MCP_CONFIG, the mcpServers shape CLI agents read),
// connects to the env's gateway with the official TypeScript MCP client over streamable HTTP,
// lists the tools, adds a note named by the prompt ($AGENTENV_PROMPT_FILE: a line
// "title: TEXT"), writes its trajectory in agentenv's line shape ($AGENTENV_TRAJECTORY) and
// prints its answer.
const fs = require("fs");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const lines = [];
const log = (l) => lines.push(JSON.stringify({ seq: lines.length + 1, time: new Date().toISOString(), ...l }));

async function main() {
  const cfg = JSON.parse(fs.readFileSync(process.env.AGENTENV_MCP_CONFIG, "utf8"));
  const [name, server] = Object.entries(cfg.mcpServers)[0];
  const prompt = fs.readFileSync(process.env.AGENTENV_PROMPT_FILE, "utf8");
  const title = (prompt.match(/title:\s*(\S+)/) || [])[1] || "harness";

  const client = new Client({ name: "harness-agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers: server.headers } }));
  const { tools } = await client.listTools();
  log({ kind: "model", turn: 1, model: "harness-agent", text: `${name} offers ${tools.map((t) => t.name).join(", ")}`, tool_calls: 1 });

  const args = { title, body: "written by the harness agent", tags: ["harness"] };
  log({ kind: "tool_call", turn: 1, tool: "add_note", call_id: "h1", arguments: args });
  const started = Date.now();
  const res = await client.callTool({ name: "add_note", arguments: args });
  const text = (res.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
  log({ kind: "tool_result", turn: 1, tool: "add_note", call_id: "h1", text, is_error: !!res.isError, duration_ms: Date.now() - started });
  await client.close();
  if (process.env.AGENTENV_TRAJECTORY) fs.writeFileSync(process.env.AGENTENV_TRAJECTORY, lines.join("\n") + "\n");
  if (res.isError) throw new Error("add_note failed: " + text);
  console.log(`added the note ${title} with ${tools.length} tools to choose from`);
}

main().catch((e) => {
  if (process.env.AGENTENV_TRAJECTORY) fs.writeFileSync(process.env.AGENTENV_TRAJECTORY, lines.join("\n") + "\n");
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
