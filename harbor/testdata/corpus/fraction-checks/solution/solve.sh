#!/bin/bash
cd /app/project
echo "# Project" > README.md
mkdir -p src
printf '#!/bin/sh\necho main\n' > src/main.sh
chmod +x src/main.sh
echo '*.log' > .gitignore
echo "MIT License" > LICENSE
