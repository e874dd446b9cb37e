// An agent's view of a deployed env through the official TypeScript MCP client
// (@modelcontextprotocol/sdk): connect to the gateway's URL with the bearer token, list the
// tools, ask the gateway for the websites' URLs inside the env, open the first in the browser
// and take its accessibility snapshot. Prints one JSON object: {tools, env_url, navigate,
// snapshot}. Used by cmd/agentenv's TestTypeScriptClientDrivesTheBrowser.
//   AGENTENV_URL=http://127.0.0.1:PORT/mcp AGENTENV_TOKEN=... node client.mjs
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = process.env.AGENTENV_URL;
const token = process.env.AGENTENV_TOKEN;
if (!url || !token) {
  console.error("AGENTENV_URL and AGENTENV_TOKEN are required");
  process.exit(2);
}

const text = (res) => (res.content || []).filter((c) => c.type === "text").map((c) => c.text).join("");

const client = new Client({ name: "agentenv-ts-check", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const opts = { timeout: 120000 };
const { tools } = await client.listTools(undefined, opts);
const sites = JSON.parse(text(await client.callTool({ name: "list_website_urls", arguments: {} }, undefined, opts)));
const envURL = sites.websites[0].env_url;
const nav = await client.callTool({ name: "browser_navigate", arguments: { url: envURL } }, undefined, opts);
if (nav.isError) throw new Error(`browser_navigate ${envURL}: ${text(nav)}`);
const snap = await client.callTool({ name: "browser_snapshot", arguments: {} }, undefined, opts);
if (snap.isError) throw new Error(`browser_snapshot: ${text(snap)}`);
console.log(JSON.stringify({ tools: tools.map((t) => t.name), env_url: envURL, navigate: text(nav), snapshot: text(snap) }));
await client.close();
